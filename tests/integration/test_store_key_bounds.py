"""Key cap with rotation, and key history that stays bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection

from gateway.app import create_app
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store, StoreError
from tests.helpers.config import Cli, MakeConfig
from tests.helpers.dashboard import User, new_email

AiohttpClient = Callable[..., Any]
DAY_MS = 86_400_000


class CountingConnection(Connection):
    """Counts what goes over the wire: one send is one round trip (a pipeline is one)."""

    sends = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        await super().send_packed_command(command, check_health)


@pytest.fixture
async def counted(redis_url: str) -> AsyncIterator[Redis]:
    pool = ConnectionPool.from_url(
        redis_url, decode_responses=True, connection_class=CountingConnection
    )
    client = Redis.from_pool(pool)
    yield client
    await client.aclose()


async def test_grace_keys_count_towards_the_cap(store: Store, account: str) -> None:
    keys = [(await store.create_key(account, max_keys=3))[1] for _ in range(3)]
    with pytest.raises(StoreError, match="grace period"):
        await store.rotate_key(keys[0].id, grace_ms=3_600_000, max_keys=3)
    assert await store.active_key_count(account) == 3
    await store.rotate_key(keys[0].id, grace_ms=0, max_keys=3)  # the old one stops now
    assert await store.active_key_count(account) == 3
    await store.revoke_key(keys[1].id)
    _, new = await store.rotate_key(keys[2].id, grace_ms=3_600_000, max_keys=3)
    assert await store.active_key_count(account) == 3  # two keys work while the grace runs
    with pytest.raises(StoreError, match="3 active keys"):
        await store.create_key(account, max_keys=3)
    with pytest.raises(StoreError):  # rotating the rotated key again: still capped
        await store.rotate_key(new.id, grace_ms=3_600_000, max_keys=3)


async def test_rotation_cannot_multiply_keys(store: Store, account: str) -> None:
    """The reviewer's attack: rotate over and over with a grace period."""
    key_id = (await store.create_key(account, max_keys=20))[1].id
    for _ in range(19):
        await store.create_key(account, max_keys=20)
    made = 0
    for _ in range(10):
        try:
            key_id = (await store.rotate_key(key_id, grace_ms=DAY_MS, max_keys=20))[1].id
            made += 1
        except StoreError:
            pass
    assert made == 0 and await store.active_key_count(account) == 20


async def test_parallel_creates_cannot_pass_the_cap(store: Store, account: str) -> None:
    results = await asyncio.gather(
        *(store.create_key(account, max_keys=4) for _ in range(12)), return_exceptions=True
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 4
    assert all(isinstance(r, StoreError) for r in results if isinstance(r, BaseException))
    assert await store.active_key_count(account) == 4


@pytest.mark.slow
def test_the_cli_applies_the_same_cap(cli: Cli) -> None:
    code, _, err = cli("accounts", "create", "cap@example.com", stdin="long password\n")
    assert code == 0, err
    for _ in range(20):
        code, _, err = cli("keys", "create", "--account", "cap@example.com")
        assert code == 0, err
    code, out, err = cli("keys", "create", "--account", "cap@example.com")
    assert code == 1 and "20 active keys" in err and out == ""
    _, out, _ = cli("keys", "list", "--account", "cap@example.com", "--json")
    key_id = orjson.loads(out)[0]["id"]
    code, _, err = cli("keys", "rotate", key_id, "--grace", "1h")
    assert code == 1 and "grace period" in err
    code, _, err = cli("keys", "rotate", key_id, "--grace", "0")
    assert code == 0, err


async def test_stopped_keys_get_a_ttl(store: Store, account: str, redis: Redis) -> None:
    key, rec = await store.create_key(account)
    rkey = record_key(store.prefix, key_hash(key))
    assert await redis.pttl(rkey) == -1  # a working key without end never expires
    await store.revoke_key(rec.id)
    ttl = await redis.pttl(rkey)
    assert 29 * DAY_MS < ttl <= 30 * DAY_MS
    assert 29 * DAY_MS < await redis.pttl(f"{store.prefix}:i:{rec.id}") <= 30 * DAY_MS
    key2, rec2 = await store.create_key(account, expires_in_ms=DAY_MS)
    ttl = await redis.pttl(record_key(store.prefix, key_hash(key2)))
    assert 30 * DAY_MS < ttl <= 31 * DAY_MS  # its end plus the retention
    await store.rotate_key(rec2.id, grace_ms=3_600_000)
    ttl = await redis.pttl(record_key(store.prefix, key_hash(key2)))
    assert 30 * DAY_MS < ttl <= 30 * DAY_MS + 3_600_000


@pytest.mark.slow
async def test_history_is_bounded_and_listed_in_a_few_round_trips(
    counted: Redis, prefix: str, redis: Redis
) -> None:
    store = Store(counted, prefix=prefix, max_inactive_keys=20)
    acct = (await store.create_account(new_email(), "long enough pw")).id
    keep = [(await store.create_key(acct, name="keep"))[1].id for _ in range(3)]

    async def round_trips_of_listing() -> tuple[int, int]:
        before = CountingConnection.sends
        records = await store.list_keys(acct)
        return CountingConnection.sends - before, len(records)

    for _ in range(150):
        _, rec = await store.create_key(acct, name="cycle")
        await store.revoke_key(rec.id)
    trips, listed = await round_trips_of_listing()  # the first listing also prunes
    assert trips <= 5 and listed == 3 + 20
    trips, listed = await round_trips_of_listing()
    assert trips <= 4 and listed == 23
    assert await redis.scard(f"{prefix}:a:{{{acct}}}:keys") == 23
    names = [r.name for r in await store.list_keys(acct)]
    assert names.count("keep") == 3  # working keys are never pruned
    assert {r.id for r in await store.list_keys(acct) if r.name == "keep"} == set(keep)


async def test_old_stopped_keys_are_forgotten(store: Store, account: str, redis: Redis) -> None:
    _, old = await store.create_key(account)
    _, recent = await store.create_key(account)
    await store.revoke_key(old.id)
    await store.revoke_key(recent.id)
    now = await store.now_ms()
    # ``old`` stopped 31 days ago (past the 30-day retention), e.g. its TTL was lost
    khash = await store.key_hash_of(old.id)
    await redis.hset(record_key(store.prefix, khash), "rev", now - 31 * DAY_MS)
    assert [r.id for r in await store.list_keys(account)] == [recent.id]
    assert not await redis.exists(record_key(store.prefix, khash))


@pytest.mark.slow
async def test_keys_page_stays_small_after_many_cycles(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await aiohttp_client(TestServer(create_app(make_config())))
    user = User(client, new_email())
    await user.signup()
    for _ in range(60):
        _, key_id = await user.create_key(name="cycle")
        await user.post(f"/dashboard/keys/{key_id}/revoke")
    resp = await client.get("/dashboard/keys")
    html = await resp.text()
    rows = await user.key_rows()
    assert len(rows) == 20 and set(rows.values()) == {"Revoked"}
    assert len(html) < 80_000, len(html)


async def _records_read(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_hgetall", {}).get("calls", 0))


async def test_the_cap_is_checked_without_reading_every_key(
    store: Store, account: str, redis: Redis
) -> None:
    """Creating a key reads the account's record, not the record of each of its keys."""
    made = [(await store.create_key(account, max_keys=20))[1] for _ in range(12)]
    await store.revoke_key(made[0].id)
    await store.rotate_key(made[1].id, grace_ms=3_600_000, max_keys=20)  # both count
    before = await _records_read(redis)
    await store.create_key(account, max_keys=20)
    assert await _records_read(redis) - before <= 1  # the account; 13 keys were 14 reads
    assert await store.active_key_count(account) == 13
    await store.create_key(account, max_keys=20, expires_in_ms=1)  # stops almost at once
    await asyncio.sleep(0.01)
    assert await store.active_key_count(account) == 13


async def test_a_missing_index_is_rebuilt_from_the_records(
    store: Store, account: str, redis: Redis
) -> None:
    """Keys made before the index existed still count."""
    for _ in range(3):
        await store.create_key(account, max_keys=3)
    await redis.delete(f"{store.prefix}:a:{{{account}}}:kw")
    with pytest.raises(StoreError, match="3 active keys"):
        await store.create_key(account, max_keys=3)
    assert await redis.zcard(f"{store.prefix}:a:{{{account}}}:kw") == 3
