"""A key's private-transaction choice: stored, published, set by the CLI, kept on rotation."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from gateway.redis.keyspace import keys_channel, record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store, StoreError
from gateway.store.keytx import set_private_tx
from gateway.tx.keymode import KeyModes, stricter

CLI = Callable[..., tuple[int, str, str]]


async def _key(store: Store) -> tuple[str, str, str]:
    acct = await store.create_account(f"p-{secrets.token_hex(3)}@example.com", "long password")
    key, record = await store.create_key(acct.id, name="trader")
    return acct.id, record.id, key


async def test_the_choice_is_stored_published_and_read_by_the_gateway(
    redis: Redis, store: Store, prefix: str
) -> None:
    acct, key_id, key = await _key(store)
    khash = key_hash(key)
    modes = KeyModes(redis, prefix, ttl_s=60)
    assert await modes.mode(khash) == ""
    pubsub: Any = redis.pubsub()
    await pubsub.subscribe(keys_channel(prefix))
    record = await set_private_tx(store, acct, key_id, "fallback")
    assert record.private_tx == "fallback"
    assert await redis.hget(record_key(prefix, khash), "ptx") == "fallback"
    published = None
    for _ in range(50):
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if msg is not None:
            published = msg["data"]
            break
    await pubsub.aclose()
    assert published == khash
    assert await modes.mode(khash) == ""  # cached until the key event arrives
    modes.invalidate(khash)
    assert await modes.mode(khash) == "fallback"
    with pytest.raises(StoreError):
        await set_private_tx(store, acct, key_id, "maybe")
    other, _, _ = await _key(store)
    with pytest.raises(StoreError):  # another account's key: not found
        await set_private_tx(store, other, key_id, "on")


def test_the_stricter_of_plan_and_key_applies() -> None:
    assert stricter("off", "on") == "on"
    assert stricter("on", "off") == "on"  # a plan that promises privacy keeps it
    assert stricter("fallback", "") == "fallback"
    assert stricter("off", "fallback") == "fallback"
    assert stricter("fallback", "on") == "on"


async def test_rotation_keeps_the_choice(store: Store) -> None:
    acct, key_id, _ = await _key(store)
    await set_private_tx(store, acct, key_id, "on")
    _new_key, new = await store.rotate_key(key_id, account_id=acct)
    assert (await store.get_key(new.id)).private_tx == "on"


async def test_cli_keys_update_private_tx(cli: CLI, store: Store) -> None:
    _, key_id, _ = await _key(store)
    code, out, _ = await asyncio.to_thread(
        cli, "keys", "update", key_id, "--private-tx", "on", "--json"
    )
    assert code == 0 and orjson.loads(out) == {"id": key_id, "private_tx": "on"}
    assert (await store.get_key(key_id)).private_tx == "on"
    code, out, _ = await asyncio.to_thread(cli, "keys", "update", key_id, "--private-tx", "off")
    assert code == 0 and out.strip() == f"key {key_id} private transactions off: the plan's route"
    assert (await store.get_key(key_id)).private_tx == ""
    with pytest.raises(SystemExit) as exc:  # argparse refuses it before any Redis call
        cli("keys", "update", key_id, "--private-tx", "yes")
    assert exc.value.code == 2


async def test_cli_keys_update_bundle_options(cli: CLI, store: Store, redis: Redis) -> None:
    _, key_id, key = await _key(store)
    code, out, _ = await asyncio.to_thread(
        cli,
        "keys",
        "update",
        key_id,
        "--no-merge",
        "on",
        "--mev-builders",
        "bloxroute,48club",
        "--json",
    )
    assert code == 0, out
    options = {"noMerge": True, "positionFirst": False, "mev_builders": ["bloxroute", "48club"]}
    assert orjson.loads(out) == {"id": key_id, "bundle": options}
    code, out, _ = await asyncio.to_thread(
        cli, "keys", "update", key_id, "--position-first", "on", "--json"
    )
    assert orjson.loads(out)["bundle"] == {**options, "positionFirst": True}  # the rest kept
    modes = KeyModes(redis, store.prefix)
    assert (await modes.settings(key_hash(key)))[1] == {**options, "positionFirst": True}
    code, _, err = await asyncio.to_thread(
        cli, "keys", "update", key_id, "--mev-builders", "not a name!"
    )
    assert code != 0 and "not a builder name" in err
    code, _, err = await asyncio.to_thread(cli, "keys", "update", key_id)
    assert code != 0 and "nothing to change" in err
