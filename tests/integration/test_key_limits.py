"""Per-key caps in the store and the CLI (``gateway keys limit``), the month's cost in
``gateway usage --json``."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from gateway.config import config_from_dict
from gateway.redis.keyspace import keys_channel, record_key, usage_day
from gateway.rpc.auth import key_hash
from gateway.store.accounts import DAY_MS, NotFound, Store, StoreError
from gateway.store.insightquery import InsightStore, fmt_money
from gateway.store.keylimits import KeyLimits, parse_daily, parse_rate

CLI = Callable[..., tuple[int, str, str]]
PLANS = config_from_dict({}).plans  # free 25/s, payg 300/s


async def _account_key(store: Store, plan: str = "free") -> tuple[str, str, str]:
    acct = await store.create_account(
        f"l-{secrets.token_hex(3)}@example.com", "long password", plan
    )
    key, record = await store.create_key(acct.id, name="capped")
    return acct.id, record.id, key


async def test_caps_are_stored_in_the_record_and_published(
    redis: Redis, store: Store, prefix: str
) -> None:
    acct, key_id, key = await _account_key(store)
    khash = key_hash(key)
    pubsub: Any = redis.pubsub()
    await pubsub.subscribe(keys_channel(prefix))
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    limits = KeyLimits(store, PLANS)
    record = await limits.set_key_limits(acct, key_id, rate=2.5, daily_cu=1000)
    assert (record.rate_cap, record.daily_cu_cap) == (2.5, 1000)
    fields = await redis.hmget(record_key(prefix, khash), "rcap", "dcap")
    assert fields == ["2.5", "1000"]
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    assert message is not None and message["data"] == khash
    # Whole numbers are written the way admit.lua and the form read them.
    await limits.set_key_limits(acct, key_id, rate=25.0, daily_cu=None)
    assert await redis.hmget(record_key(prefix, khash), "rcap", "dcap") == ["25", ""]
    cleared = await limits.set_key_limits(acct, key_id, rate=None, daily_cu=None)
    assert (cleared.rate_cap, cleared.daily_cu_cap) == (None, None)
    assert cleared.as_json(0)["rate_cap"] is None
    for _ in range(2):
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
        assert message is not None and message["data"] == khash
    await pubsub.aclose()


@pytest.mark.parametrize(
    ("rate", "daily", "words"),
    [
        (25.01, None, "at most the Free plan's 25"),
        (0.0, None, "positive"),
        (-1.0, None, "positive"),
        (float("nan"), None, "positive"),
        (float("inf"), None, "positive"),
        (None, 0, "at least 1"),
        (None, -5, "at least 1"),
        (None, 10**16, "at most"),
    ],
)
async def test_caps_are_validated(
    store: Store, redis: Redis, prefix: str, rate: float | None, daily: int | None, words: str
) -> None:
    acct, key_id, key = await _account_key(store)
    with pytest.raises(StoreError, match=words):
        await KeyLimits(store, PLANS).set_key_limits(acct, key_id, rate=rate, daily_cu=daily)
    assert await redis.hmget(record_key(prefix, key_hash(key)), "rcap", "dcap") == [None, None]


async def test_payg_allows_a_higher_cap_and_other_accounts_cannot_touch_it(store: Store) -> None:
    acct, key_id, _ = await _account_key(store, "payg")
    limits = KeyLimits(store, PLANS)
    assert (await limits.set_key_limits(acct, key_id, rate=300, daily_cu=1)).rate_cap == 300
    other, _, _ = await _account_key(store)
    with pytest.raises(NotFound):
        await limits.set_key_limits(other, key_id, rate=1, daily_cu=None)
    with pytest.raises(NotFound):
        await limits.set_key_limits(acct, "key_nope", rate=1, daily_cu=None)
    await store.revoke_key(key_id)
    with pytest.raises(StoreError, match="revoked"):
        await limits.set_key_limits(acct, key_id, rate=1, daily_cu=None)


async def test_rotation_keeps_the_caps(store: Store) -> None:
    acct, key_id, _ = await _account_key(store)
    await KeyLimits(store, PLANS).set_key_limits(acct, key_id, rate=3, daily_cu=500)
    _, new = await store.rotate_key(key_id, 0, account_id=acct)
    fresh = await store.get_key(new.id)
    assert (fresh.rate_cap, fresh.daily_cu_cap) == (3.0, 500)


def test_money() -> None:
    assert [fmt_money(v) for v in (0, 0.00001, 0.0005, 0.5, 0.125, 1, 1234.5)] == [
        "$0.00",
        "less than $0.0001",
        "$0.0005",
        "$0.50",
        "$0.125",
        "$1.00",
        "$1,234.50",
    ]


def test_form_values() -> None:
    assert parse_rate("") is None and parse_daily("  ") is None
    assert parse_rate(" 2.5 ") == 2.5
    assert parse_daily("1,000") == 1000 and parse_daily("1_000") == 1000
    for bad in ("ten", "0x10", "1e3.5"):
        with pytest.raises(StoreError):
            parse_rate(bad)
    for bad in ("1.5", "-3", "٣", "1e3"):
        with pytest.raises(StoreError):
            parse_daily(bad)


async def test_month_cost_sums_days_since_the_first(
    redis: Redis, store: Store, prefix: str
) -> None:
    _, key_id, key = await _account_key(store, "payg")
    _, other_id, other_key = await _account_key(store)
    now = 1_800_000_000_000  # 2027-01-15 08:00 UTC
    for k, day, cu in ((key, 0, 999_000), (key, 14, 1_000), (key, -1, 5), (other_key, 14, 7)):
        # day offsets from the 1st; -1 is December: not this month
        day_no = (1_798_761_600_000 // DAY_MS) + day
        await redis.hset(usage_day(prefix, key_hash(k), day_no), "cu", cu)
    records = [await store.get_key(key_id), await store.get_key(other_id)]
    cost = await InsightStore(store, PLANS).month_cost(records, "payg", now_ms=now)
    assert cost.compute_units == 1_000_007
    assert cost.per_key == {key_id: 1_000_000, other_id: 7}
    assert cost.price_per_million_cu == 0.5
    assert cost.estimated_cost == pytest.approx(0.5000035)
    assert cost.as_json()["month"] == "2027-01"
    free = await InsightStore(store, PLANS).month_cost(records, "free", now_ms=now)
    assert free.estimated_cost == 0


# -- the CLI ------------------------------------------------------------------------


def _json(out: str) -> dict[str, object]:
    value = orjson.loads(out)
    assert isinstance(value, dict)
    return value


async def test_cli_keys_limit(cli: CLI, store: Store) -> None:
    _, key_id, _ = await _account_key(store)
    code, out, _ = await asyncio.to_thread(cli, "keys", "limit", key_id, "--rate", "5", "--json")
    assert code == 0 and _json(out) == {"id": key_id, "rate_cap": 5.0, "daily_cu_cap": None}
    # A cap not given stays; text output names both.
    code, out, _ = await asyncio.to_thread(cli, "keys", "limit", key_id, "--daily-cu", "2000")
    assert code == 0 and out.strip() == f"key {key_id} limits: 5/s, 2000 CU/day"
    record = await store.get_key(key_id)
    assert (record.rate_cap, record.daily_cu_cap) == (5.0, 2000)
    code, _, err = await asyncio.to_thread(cli, "keys", "limit", key_id, "--rate", "26")
    assert code == 1 and "at most the Free plan's 25" in err
    code, _, err = await asyncio.to_thread(cli, "keys", "limit", key_id, "--clear", "--rate", "1")
    assert code == 1 and "--clear" in err
    code, out, _ = await asyncio.to_thread(cli, "keys", "limit", key_id, "--clear", "--json")
    assert code == 0 and _json(out)["rate_cap"] is None and _json(out)["daily_cu_cap"] is None
    code, _, err = await asyncio.to_thread(cli, "keys", "limit", "key_missing", "--rate", "1")
    assert code == 1 and "no key" in err
    email = (await store.account((await store.get_key(key_id)).account)).email
    code, out, _ = await asyncio.to_thread(cli, "keys", "list", "--account", email, "--json")
    assert code == 0 and orjson.loads(out)[0]["rate_cap"] is None


async def test_cli_usage_json_shows_the_month(
    cli: CLI, store: Store, redis: Redis, prefix: str
) -> None:
    _, key_id, key = await _account_key(store, "payg")
    today = await store.now_ms() // DAY_MS
    await redis.hset(usage_day(prefix, key_hash(key), today), "cu", 2_000_000)
    code, out, _ = await asyncio.to_thread(cli, "usage", key_id, "--json")
    assert code == 0
    month = _json(out)["month"]
    assert isinstance(month, dict)
    assert month["compute_units"] == 2_000_000
    assert month["price_per_million_cu"] == 0.5 and month["estimated_cost"] == 1.0
    assert month["plan"] == "payg"
    code, out, _ = await asyncio.to_thread(cli, "usage", key_id)
    assert code == 0 and "this month: 2000000 compute units, estimated $1.00" in out
