"""MuxRedis.call raises on a Redis error reply instead of handing it back as a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.redis.embedded import RedisProcess
from gateway.redis.mux import MuxRedis, RedisReplyError, RedisUnavailable


async def test_an_error_reply_raises_and_the_connection_stays_usable(tmp_path: Path) -> None:
    with RedisProcess(tmp_path, persist=False) as proc:
        mux = MuxRedis(proc.url)
        try:
            await mux.call(("SET", "s", "text"))
            with pytest.raises(RedisReplyError, match="WRONGTYPE"):
                await mux.call(("HGET", "s", "field"))
            with pytest.raises(RedisReplyError, match="unknown command"):
                await mux.call(("NOPE",))
            # Replies after an error still pair with their calls.
            assert await mux.call(("GET", "s")) == "text"
            await mux.ping()
        finally:
            await mux.close()


async def test_ping_refused_by_redis_is_unavailable(tmp_path: Path) -> None:
    with RedisProcess(tmp_path, persist=False, extra_args=("--requirepass", "s3cret")) as proc:
        mux = MuxRedis(proc.url)  # no password: Redis answers -NOAUTH
        try:
            with pytest.raises(RedisUnavailable, match="PING failed: NOAUTH"):
                await mux.ping()
        finally:
            await mux.close()
