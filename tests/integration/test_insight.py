"""InsightSink against a real Redis: flush, the capped call log, merged percentiles."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.config import ConfigError, config_from_dict
from gateway.redis import keyspace as ks
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R
from gateway.rpc.auth import key_hash
from gateway.rpc.errors import reply_code
from gateway.store.accounts import Store
from gateway.store.insight import (
    HOUR_MS,
    SLOT_MS,
    InsightSink,
    bucket_of,
    bucket_value,
    percentile,
)
from gateway.store.insightquery import InsightStore, month_start_ms
from gateway.store.security import SecurityStore

NOW = 1_800_000_000_000  # a fixed moment: slots and hours are computed from it


async def _key(store: Store) -> tuple[str, str, str]:
    """(account id, key id, key hash) of a fresh key."""
    acct = await store.create_account(f"i-{secrets.token_hex(3)}@example.com", "long password")
    key, record = await store.create_key(acct.id)
    return acct.id, record.id, key_hash(key)


async def test_record_touches_no_redis_and_flush_writes_the_sums(
    redis: Redis, store: Store, prefix: str
) -> None:
    _, _, khash = await _key(store)
    sink = InsightSink(redis, prefix)
    for _ in range(3):
        sink.record(khash, "eth_call", 0, 200, 2.0, "203.0.113.9")
    sink.record(khash, "eth_call", -32005, 429, 0.3, "203.0.113.9")
    sink.record(khash, "eth_getLogs", -32603, 502, 40.0, "2001:db8:1:2::7")
    assert await redis.keys(f"{prefix}:{{{khash}}}:q:*") == []  # memory only until flush
    await sink.flush(now_ms=NOW)
    slot = await redis.hgetall(ks.insight_slot(prefix, khash, NOW // SLOT_MS))
    hour = await redis.hgetall(ks.insight_hour(prefix, khash, NOW // HOUR_MS))
    assert slot == hour
    assert slot["c|eth_call"] == "4"
    assert slot["e|eth_call|-32005"] == "1"
    assert slot["e|eth_getLogs|-32603"] == "1"
    assert slot[f"b|eth_call|{bucket_of(2.0)}"] == "3"
    assert 0 < await redis.pttl(ks.insight_slot(prefix, khash, NOW // SLOT_MS)) <= 2 * HOUR_MS
    assert 0 < await redis.pttl(ks.insight_hour(prefix, khash, NOW // HOUR_MS)) <= 49 * HOUR_MS
    # Only failed calls are logged, newest first, with the network, never more.
    entries: Any = await redis.xrevrange(ks.insight_log(prefix, khash))
    assert [e[1]["method"] for e in entries] == ["eth_getLogs", "eth_call"]
    assert entries[0][1]["ip"] == "2001:db8:1::/48"
    assert entries[1][1]["ip"] == "203.0.113.0/24"
    assert entries[1][1]["code"] == "-32005" and entries[1][1]["status"] == "429"
    assert set(entries[0][1]) == {"time", "method", "code", "status", "latency_ms", "ip"}
    assert await redis.pttl(ks.insight_log(prefix, khash)) > 0
    await sink.flush(now_ms=NOW)  # nothing new: nothing written twice
    assert (await redis.hgetall(ks.insight_slot(prefix, khash, NOW // SLOT_MS)))[
        "c|eth_call"
    ] == "4"


async def test_call_log_is_capped_and_read_newest_first(
    redis: Redis, store: Store, prefix: str
) -> None:
    acct, key_id, khash = await _key(store)
    cap = 20
    sink = InsightSink(redis, prefix, log_cap=cap)
    for batch in range(15):
        for i in range(cap * 2):  # twice the cap per flush: memory keeps the newest cap
            sink.record(khash, f"m{batch}", -32005, 429, float(i), "198.51.100.4")
        await sink.flush()
    length = await redis.xlen(ks.insight_log(prefix, khash))
    # MAXLEN ~ trims whole stream nodes (100 entries by default in Redis):
    # bounded by the cap plus one node, far below the 300 flushed.
    assert cap <= length <= cap + 100
    plans = config_from_dict({}).plans
    calls = await InsightStore(store, plans).calls(key_id, account_id=acct, limit=cap)
    assert len(calls) == cap
    assert {c.method for c in calls} == {"m14"}
    assert [c.latency_ms for c in calls] == [float(i) for i in range(cap * 2 - 1, cap - 1, -1)]
    only = await InsightStore(store, plans).calls(key_id, method="m13", account_id=acct)
    assert only and {c.method for c in only} == {"m13"}
    assert await InsightStore(store, plans).calls(key_id, code=-32601, account_id=acct) == []


async def test_percentiles_after_merging_two_workers(
    redis: Redis, store: Store, prefix: str
) -> None:
    acct, key_id, khash = await _key(store)
    fast, slow = InsightSink(redis, prefix), InsightSink(redis, prefix)
    for _ in range(90):
        fast.record(khash, "eth_call", 0, 200, 2.0, "")
    for _ in range(10):
        slow.record(khash, "eth_call", -32603, 504, 500.0, "192.0.2.1")
    now = await store.now_ms()
    await fast.flush(now_ms=now)
    await slow.flush(now_ms=now)
    insight = InsightStore(store, config_from_dict({}).plans)
    for window in ("hour", "day"):
        (row,) = await insight.methods(key_id, window, account_id=acct)
        assert row.method == "eth_call" and row.calls == 100
        assert row.errors == {-32603: 10} and row.error_count == 10
        assert row.p50_ms is not None and row.p99_ms is not None
        assert row.p50_ms == pytest.approx(2.0, rel=0.1)  # 90 of 100 calls took 2 ms
        assert row.p99_ms == pytest.approx(500.0, rel=0.1)  # ...and the slowest 10 500 ms


async def test_windows_only_sum_their_own_slots(redis: Redis, store: Store, prefix: str) -> None:
    acct, key_id, khash = await _key(store)
    sink = InsightSink(redis, prefix)
    now = await store.now_ms()
    sink.record(khash, "eth_chainId", 0, 200, 1.0, "")
    await sink.flush(now_ms=now - 3 * HOUR_MS)  # three hours ago: in the day, not the hour
    sink.record(khash, "eth_chainId", 0, 200, 1.0, "")
    await sink.flush(now_ms=now)
    insight = InsightStore(store, config_from_dict({}).plans)
    (hour,) = await insight.methods(key_id, "hour", account_id=acct)
    (day,) = await insight.methods(key_id, "day", account_id=acct)
    assert (hour.calls, day.calls) == (1, 2)


@pytest.mark.slow
async def test_redis_down_keeps_the_sums_for_the_next_flush(
    redis: Redis, store: Store, prefix: str, unused_tcp_port: int
) -> None:
    _, _, khash = await _key(store)
    dead = Redis(port=unused_tcp_port, socket_connect_timeout=0.2, socket_timeout=0.2)
    sink = InsightSink(dead, prefix)
    sink.record(khash, "eth_call", -32005, 429, 1.0, "192.0.2.8")
    await sink.flush(now_ms=NOW)  # fails quietly, keeps everything
    await dead.aclose()
    sink._redis = redis  # the same sink once Redis is back
    sink.record(khash, "eth_call", 0, 200, 1.0, "")
    await sink.flush(now_ms=NOW)
    slot = await redis.hgetall(ks.insight_slot(prefix, khash, NOW // SLOT_MS))
    assert slot["c|eth_call"] == "2" and slot["e|eth_call|-32005"] == "1"
    assert await redis.xlen(ks.insight_log(prefix, khash)) == 1


async def test_distinct_keys_per_flush_are_capped(redis: Redis, prefix: str) -> None:
    sink = InsightSink(redis, prefix, max_keys=2)
    for i in range(5):
        sink.record(f"{i:064x}", "eth_call", 0, 200, 1.0, "")
    sink.record(f"{0:064x}", "eth_call", 0, 200, 1.0, "")  # a pending key still counts
    assert sink.dropped == 3
    await sink.flush(now_ms=NOW)
    assert len(await redis.keys(f"{prefix}:*:q:f:*")) == 2


def test_buckets_and_percentiles() -> None:
    for ms in (0.2, 1.0, 3.7, 25.0, 480.0, 9000.0):
        assert bucket_value(bucket_of(ms)) == pytest.approx(ms, rel=0.1)
    assert bucket_of(0.0) == bucket_of(0.01) == 0
    assert bucket_of(10**9) == bucket_of(10**7)
    assert percentile({}, 0.5) is None
    hist = {bucket_of(1.0): 50, bucket_of(100.0): 50}
    assert percentile(hist, 0.5) == pytest.approx(1.0, rel=0.1)
    assert percentile(hist, 0.51) == pytest.approx(100.0, rel=0.1)


def test_reply_code() -> None:
    assert reply_code(b'{"jsonrpc":"2.0","id":1,"result":"0x1"}') == 0
    assert reply_code(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"x"}}') == -32005
    batch = b'[{"id":1,"result":"0x1"},{"id":2,"error":{"code":-32601,"message":"m"}}]'
    assert reply_code(batch) == -32601
    assert reply_code(b'{"error": not json') == 0
    assert reply_code(b'{"result":"the word \\"error\\" in a string"}') == 0


def test_each_call_of_a_batch_answer_carries_its_code() -> None:
    def calls() -> list[rpc.Call]:  # the second is a notification: no place, no code
        return [rpc.Call("eth_call", [], i, i is not None) for i in (1, None, 2)]

    nonce = {"code": -32000, "message": "nonce too low"}
    made = calls()  # gateway ids 10, 11, 12 in order
    rpc.restore_batch(
        b"", made, 10, parsed=[{"id": 10, "result": "0x1"}, {"id": 12, "error": nonce}]
    )
    assert [rpc.call_code(c) for c in made] == [0, 0, -32000]
    made = calls()  # one error about the whole batch: every call's code
    rpc.restore_batch(b"", made, 10, parsed={"id": None, "error": {**nonce, "code": -32005}})
    assert [rpc.call_code(c) for c in made] == [-32005, 0, -32005]
    made = calls()  # the node left a call unanswered: -32603 for it
    rpc.restore_batch(b"", made, 10, parsed=[{"id": 10, "result": "0x1"}])
    assert [rpc.call_code(c) for c in made] == [0, 0, -32603]
    made = calls()  # refused whole (the key, Redis away): the refusal's code
    R.request_error(rpc.UNAUTHORIZED, R.ParsedRequest(made, True))
    assert [rpc.call_code(c) for c in made] == [-32001, 0, -32001]
    made = calls()  # no node answered: the failure's code, a call's own error kept
    made[2].error = rpc.INVALID_PARAMS
    R.upstream_failed(rpc.UPSTREAM_TIMEOUT, R.ParsedRequest(made, True), {})
    assert [rpc.call_code(c) for c in made] == [-32603, 0, -32602]


def test_month_start() -> None:
    assert month_start_ms(1_800_000_000_000) == 1_798_761_600_000  # 2027-01-15 -> 2027-01-01


async def test_deleting_the_account_removes_its_call_logs(
    redis: Redis, store: Store, prefix: str
) -> None:
    acct, _, khash = await _key(store)
    sink = InsightSink(redis, prefix)
    sink.record(khash, "eth_call", -32005, 429, 1.0, "198.51.100.7")
    await sink.flush()
    assert await redis.exists(ks.insight_log(prefix, khash))
    await SecurityStore(store).delete_account(await store.account(acct))
    assert not await redis.exists(ks.insight_log(prefix, khash))


def test_insight_and_price_config_is_validated() -> None:
    cfg = config_from_dict(
        {"insight": {"log_cap": 50}, "plans": {"free": {"price_per_million_cu": 0.25}}}
    )
    assert cfg.insight.log_cap == 50 and cfg.insight.interval_s == 1.0
    assert cfg.plan("free").price_per_million_cu == 0.25
    assert cfg.plan("payg").price_per_million_cu == 0.5
    for raw, path in (
        ({"insight": {"interval_s": 0}}, "insight"),
        ({"insight": {"log_cap": 0}}, "insight"),
        ({"insight": {"log_cap": -1}}, "insight.log_cap"),
        ({"insight": {"nope": 1}}, "insight.nope"),
        ({"plans": {"payg": {"price_per_million_cu": -1}}}, "plans.payg.price_per_million_cu"),
        ({"plans": {"payg": {"price_per_million_cu": "1"}}}, "plans.payg.price_per_million_cu"),
    ):
        with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
            config_from_dict(raw)
