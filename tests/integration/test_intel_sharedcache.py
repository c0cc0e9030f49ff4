"""The shared Redis cache tier against a real redis-server: TTLs, the byte cap, failures."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.intel.cache import call_key
from gateway.intel.sharedcache import KEY_OVERHEAD, SHARDS, SharedCache
from gateway.redis.embedded import free_port


@pytest.fixture
async def raw_redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)  # bytes in, bytes out
    yield client
    await client.aclose()


def tier(redis: Redis, prefix: str, **kw: int | float) -> SharedCache:
    opts: dict[str, int | float] = {
        "ttl_s": 60.0,
        "max_bytes": 1 << 20,
        "max_entry_bytes": 1 << 16,
        **kw,
    }
    return SharedCache(
        redis,
        prefix=prefix,
        network="bsc",
        ttl_s=float(opts["ttl_s"]),
        max_bytes=int(opts["max_bytes"]),
        max_entry_bytes=int(opts["max_entry_bytes"]),
    )


async def test_roundtrip_with_a_ttl(raw_redis: Redis, prefix: str) -> None:
    cache = tier(raw_redis, prefix)
    key = call_key("eth_getBlockByNumber", ["0x10", False])
    assert await cache.get(key) is None
    assert await cache.put(key, b'{"number":"0x10"}')
    assert await cache.get(key) == b'{"number":"0x10"}'
    names = [k async for k in raw_redis.scan_iter(match=f"{{{prefix}:cache:bsc:*")]
    values = [n for n in names if not n.endswith(b":bytes")]
    assert len(values) == 1
    assert 0 < await raw_redis.pttl(values[0]) <= 60_000
    assert (cache.hits, cache.misses, cache.stored) == (1, 1, 1)
    other = SharedCache(
        raw_redis, prefix=prefix, network="opbnb", ttl_s=60, max_bytes=1 << 20, max_entry_bytes=1024
    )
    assert await other.get(key) is None  # networks never share entries


async def test_live_bytes_never_exceed_the_cap(raw_redis: Redis, prefix: str) -> None:
    cap = SHARDS * 2_000
    cache = tier(raw_redis, prefix, max_bytes=cap, max_entry_bytes=1_000)
    value = b"v" * 400
    stored = 0
    for i in range(400):
        stored += await cache.put(call_key("eth_getLogs", [{"fromBlock": hex(i)}]), value)
    assert 0 < stored < 400 and cache.refused == 400 - stored
    live = 0
    async for name in raw_redis.scan_iter(match=f"{{{prefix}:cache:bsc:*"):
        if not name.endswith(b":bytes"):
            live += len(name) + len(await raw_redis.get(name) or b"") + KEY_OVERHEAD
    assert live <= cap
    assert live > cap // 2  # the cap is used, not just respected


async def test_an_entry_over_the_limit_is_skipped(raw_redis: Redis, prefix: str) -> None:
    cache = tier(raw_redis, prefix, max_entry_bytes=100)
    assert not await cache.put(b"k", b"x" * 200)
    assert await cache.get(b"k") is None


async def test_the_script_survives_a_script_flush(raw_redis: Redis, prefix: str) -> None:
    cache = tier(raw_redis, prefix)
    assert await cache.put(b"a", b"1")
    await raw_redis.script_flush()
    assert await cache.put(b"b", b"2")  # redis-py reloads on NOSCRIPT
    assert await cache.get(b"b") == b"2"


async def test_redis_down_is_a_miss_not_a_failure(prefix: str) -> None:
    dead = Redis(
        host="127.0.0.1",
        port=free_port(),
        socket_timeout=0.2,
        socket_connect_timeout=0.2,
        retry=Retry(NoBackoff(), 0),  # as the gateway's hot-path clients are built
    )
    try:
        cache = tier(dead, prefix)
        assert await cache.get(b"k") is None
        assert not await cache.put(b"k", b"1")
        assert cache.errors == 2
    finally:
        await dead.aclose()
