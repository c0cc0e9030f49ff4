"""UsageSink: what it writes to a real Redis across minute and day boundaries.

The sink counts the minute in progress in plain counters and folds them into
per-minute and per-day fields when a later minute starts or a flush comes;
these tests pin the Redis layout that ``Store.usage`` reads through those
transitions, including a clock that steps back and a flush that fails.
"""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from gateway.redis import keyspace as ks
from gateway.store.usagesink import UsageSink

KH = "ab" * 32
DAY = 86_400_000
T0 = 20_000 * DAY + DAY - 90_000  # 90 s before midnight: minutes 1438 and 1439 of a day


class _Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


async def _hash(redis: Redis, key: str) -> dict[str, int]:
    return {_s(k): int(v) for k, v in (await redis.hgetall(key)).items()}


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


async def test_counts_split_by_minute_and_day(redis: Redis, prefix: str) -> None:
    clock = _Clock(T0)
    sink = UsageSink(redis, prefix, clock_ms=clock)
    sink.admitted(KH, 1, {"eth_call": 1})
    sink.admitted(KH, 3, {"eth_call": 2, "eth_getLogs": 1})
    clock.ms += 60_000  # the next minute, same day
    sink.admitted(KH, 1, {"eth_blockNumber": 1})
    sink.count(KH, "lim", 2)
    clock.ms += 60_000  # past midnight: the next day
    sink.admitted(KH, 2, {"eth_call": 2})
    await sink.flush()
    assert sink.pending() == 0
    day0, day1 = T0 // DAY, T0 // DAY + 1
    m0 = T0 // 60_000
    hour0 = await _hash(redis, ks.usage_hour(prefix, KH, m0 // 60))
    assert hour0 == {str(m0 % 60): 4, str((m0 + 1) % 60): 1}
    hour1 = await _hash(redis, ks.usage_hour(prefix, KH, (m0 + 2) // 60))
    assert hour1 == {str((m0 + 2) % 60): 2}
    assert await _hash(redis, ks.usage_day(prefix, KH, day0)) == {
        "req": 5, "m:eth_call": 3, "m:eth_getLogs": 1, "m:eth_blockNumber": 1, "lim": 2,
    }  # fmt: skip
    assert await _hash(redis, ks.usage_day(prefix, KH, day1)) == {"req": 2, "m:eth_call": 2}
    assert await redis.pttl(ks.usage_day(prefix, KH, day1)) > 0


async def test_minute_in_progress_is_flushed_and_counting_goes_on(
    redis: Redis, prefix: str
) -> None:
    """A flush inside a minute writes what is counted so far; later calls add to it."""
    clock = _Clock(T0)
    sink = UsageSink(redis, prefix, clock_ms=clock)
    sink.admitted(KH, 1, {"eth_call": 1})
    await sink.flush()
    clock.ms += 1000
    sink.admitted(KH, 1, {"eth_call": 1})
    clock.ms -= 45_000  # the wall clock stepped back into the previous minute
    sink.admitted(KH, 1, {"eth_chainId": 1})
    await sink.flush()
    m0 = T0 // 60_000
    hour = await _hash(redis, ks.usage_hour(prefix, KH, m0 // 60))
    assert hour == {str(m0 % 60): 2, str((m0 - 1) % 60): 1}
    day = await _hash(redis, ks.usage_day(prefix, KH, T0 // DAY))
    assert day == {"req": 3, "m:eth_call": 2, "m:eth_chainId": 1}


async def test_failed_flush_keeps_counts_for_the_next(
    redis: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.usage")
    clock = _Clock(T0)
    down = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)  # nothing listens
    address = "redis://:hunter22@127.0.0.1:1/0"
    sink = UsageSink(down, prefix, clock_ms=clock, address=address, log_interval_s=60.0)
    sink.admitted(KH, 2, {"eth_call": 2})
    await sink.flush()  # fails: logged, kept
    await sink.flush()  # fails again: counted, not logged
    assert sink.pending() == 1
    sink.admitted(KH, 1, {"eth_call": 1})
    sink._redis = redis  # Redis is back
    await sink.flush()
    day = await _hash(redis, ks.usage_day(prefix, KH, T0 // DAY))
    assert day == {"req": 3, "m:eth_call": 3}
    await down.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.usage"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("usage not flushed, kept for the next try (1 keys): ")
    assert "redis=redis://***@127.0.0.1:1/0 error=ConnectionError: " in lines[0]
    assert lines[1] == "usage flushed again redis=redis://***@127.0.0.1:1/0"
    assert not any("hunter22" in line for line in lines)


async def test_charges_without_calls_are_counted_by_method(redis: Redis, prefix: str) -> None:
    """WebSocket notifications are charged as 0 calls of ``eth_subscription``: by method only."""
    clock = _Clock(T0)
    sink = UsageSink(redis, prefix, clock_ms=clock)
    sink.admitted(KH, 1, {"eth_subscribe": 1})
    await sink.flush()
    sink.admitted(KH, 0, {"eth_subscription": 3})  # nothing but notifications this interval
    clock.ms += 1000
    sink.admitted(KH, 0, {"eth_subscription": 2})
    await sink.flush()
    day = await _hash(redis, ks.usage_day(prefix, KH, T0 // DAY))
    assert day["m:eth_subscription"] == 5 and day["req"] == 1
