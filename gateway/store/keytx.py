"""A key's own private-transaction choice and bundle options, set by its owner (dashboard)
or the operator (CLI).

Field ``ptx`` of the key record hash ``p:{H}:k``: ``on`` (raw transactions
go only to the network's private endpoints), ``fallback`` (the same, then
the public nodes if every private endpoint fails), ``off`` (no choice of
its own: the plan's route). The gateway applies the stricter of the plan's
and the key's (gateway/tx/keymode.py). Every change is PUBLISHed on the
key channel, so each process drops its cached copy at once.

Field ``bopt`` (JSON) holds the key's bundle options, which the builders
that take them get with each bundle or private transaction
(gateway/tx/dialects.py): ``noMerge`` and ``positionFirst`` (BlockRazor),
``mev_builders`` (bloXroute: the builders to send to; none = all).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from gateway.redis.keyspace import record_key, tx_log
from gateway.store.accounts import KeyRecord, Store, StoreError
from gateway.store.keyevents import publish_key_change

MODES: Final = ("on", "fallback", "off")
_BUILDER_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
MAX_MEV_BUILDERS: Final = 16


async def set_private_tx(store: Store, account_id: str | None, key_id: str, mode: str) -> KeyRecord:
    """Set the key's choice; ``account_id`` None is the operator, else it must own the key."""
    if mode not in MODES:
        raise StoreError('private transactions: expected "on", "fallback" or "off"')
    record = await store.get_key(key_id, account_id)
    if record.revoked_at is not None:
        raise StoreError(f"key {key_id} is revoked; its settings can no longer change")
    khash = await store.key_hash_of(key_id)
    await store.redis.hset(record_key(store.prefix, khash), "ptx", "" if mode == "off" else mode)
    await publish_key_change(store.redis, store.prefix, khash)
    return await store.get_key(key_id, account_id)


async def set_bundle_options(
    store: Store,
    account_id: str | None,
    key_id: str,
    *,
    no_merge: bool,
    position_first: bool,
    mev_builders: list[str],
) -> dict[str, Any]:
    """Set the key's bundle options; ``account_id`` None is the operator."""
    builders = [b.strip() for b in mev_builders if b.strip()]
    if len(builders) > MAX_MEV_BUILDERS:
        raise StoreError(f"MEV builders: at most {MAX_MEV_BUILDERS}")
    for name in builders:
        if not _BUILDER_NAME.match(name):
            raise StoreError(f"MEV builders: {name[:40]!r} is not a builder name")
    record = await store.get_key(key_id, account_id)
    if record.revoked_at is not None:
        raise StoreError(f"key {key_id} is revoked; its settings can no longer change")
    options: dict[str, Any] = {"noMerge": no_merge, "positionFirst": position_first}
    if builders:
        options["mev_builders"] = builders
    khash = await store.key_hash_of(key_id)
    await store.redis.hset(record_key(store.prefix, khash), "bopt", orjson.dumps(options))
    await publish_key_change(store.redis, store.prefix, khash)
    return options


async def bundle_options(store: Store, account_id: str | None, key_id: str) -> dict[str, Any]:
    """The key's bundle options (none set: noMerge and positionFirst off, every builder)."""
    await store.get_key(key_id, account_id)
    khash = await store.key_hash_of(key_id)
    raw = await store.redis.hget(record_key(store.prefix, khash), "bopt")
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


async def recent_transactions(
    store: Store, account_id: str | None, key_id: str, count: int = 50
) -> list[dict[str, str]]:
    """The key's transaction log (written by gateway/tx/txlog.py), newest first.

    Each entry: time (ms), method, hash, sender, route, accepted_by, outcome.
    """
    await store.get_key(key_id, account_id)  # NotFound unless the account owns it
    khash = await store.key_hash_of(key_id)
    rows = await store.redis.xrevrange(tx_log(store.prefix, khash), count=count)
    return [{_text(k): _text(v) for k, v in fields.items()} for _id, fields in rows]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
