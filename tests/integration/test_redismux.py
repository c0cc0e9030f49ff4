"""The multiplexed Redis connection: batching, NOSCRIPT, a hung or dead server."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.redis.embedded import RedisProcess
from gateway.redis.mux import MuxRedis, RedisUnavailable
from tests.helpers.waiting import eventually

SCRIPT = "return {KEYS[1], ARGV[1]}"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    proc = RedisProcess(tmp_path, persist=False)
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        os.kill(proc.proc.pid, signal.SIGCONT)
    proc.stop()


async def _answers_again(mux: MuxRedis, within_s: float = 3.0) -> None:
    """Wait until the mux reconnects by itself (no restart of anything)."""

    async def pong() -> bool:
        try:
            return bool(await mux.call(("PING",)) == "PONG")
        except RedisUnavailable:
            return False

    await eventually(pong, within_s, "the mux to reconnect", interval_s=0.05)


async def test_concurrent_calls_share_one_connection(redis_url: str) -> None:
    mux = MuxRedis(redis_url)
    try:
        await mux.call(("CLIENT", "SETNAME", "mux-under-test"))
        before = await mux.call(("INFO", "stats"))
        replies = await asyncio.gather(*(mux.call(("ECHO", str(i))) for i in range(500)))
        after = await mux.call(("INFO", "stats"))
        assert replies == [str(i) for i in range(500)]
        assert isinstance(before, str) and isinstance(after, str)
        # no connection was opened for the 500 calls (the server counts every accept) ...
        assert _stat(after, "total_connections_received") == _stat(
            before, "total_connections_received"
        )
        # ... and the one the mux holds is the one that carried them all
        clients = await mux.call(("CLIENT", "LIST"))
        assert isinstance(clients, str)
        ours = [line for line in clients.splitlines() if "name=mux-under-test" in line]
        assert len(ours) == 1, clients
        assert "cmd=client" in ours[0]
    finally:
        await mux.close()


def _stat(info: str, field: str) -> int:
    """One integer field of an ``INFO`` reply."""
    for line in info.splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value)
    raise AssertionError(f"{field} not in INFO")


async def test_evalsha_reloads_after_script_flush(redis_url: str) -> None:
    import hashlib

    sha = hashlib.sha1(SCRIPT.encode()).hexdigest()
    mux = MuxRedis(redis_url)
    try:
        await mux.call(("SCRIPT", "FLUSH"))
        assert await mux.evalsha(sha, SCRIPT, ["k"], ["v"]) == ["k", "v"]  # NOSCRIPT -> EVAL
        assert await mux.call(("SCRIPT", "EXISTS", sha)) == [1]
        assert await mux.evalsha(sha, SCRIPT, ["k2"], ["v2"]) == ["k2", "v2"]
        with pytest.raises(RedisUnavailable, match="script error"):
            await mux.evalsha("0" * 40, "return redis.call('NOPE')", [], [])
    finally:
        await mux.close()


async def test_hung_server_fails_within_timeout_then_recovers(own_redis: RedisProcess) -> None:
    assert own_redis.proc is not None
    mux = MuxRedis(own_redis.url, timeout_s=0.2, retry_interval_s=0.05)
    try:
        assert await mux.call(("PING",)) == "PONG"
        os.kill(own_redis.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        results = await asyncio.gather(
            *(mux.call(("PING",)) for _ in range(50)), return_exceptions=True
        )
        assert all(isinstance(r, RedisUnavailable) for r in results)
        assert time.monotonic() - started < 1.0
        os.kill(own_redis.proc.pid, signal.SIGCONT)
        await _answers_again(mux)
    finally:
        await mux.close()


async def test_dead_server_fails_fast_and_reconnects(own_redis: RedisProcess) -> None:
    mux = MuxRedis(own_redis.url, timeout_s=0.2, retry_interval_s=0.05)
    try:
        await mux.call(("SET", "x", "1"))
        own_redis.stop()
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(RedisUnavailable):
                await mux.call(("GET", "x"))
        assert time.monotonic() - started < 1.0
        own_redis.start()  # the same socket path again
        await _answers_again(mux)
    finally:
        await mux.close()


async def test_auth_and_db_from_url(tmp_path: Path) -> None:
    with RedisProcess(tmp_path, persist=False, extra_args=("--requirepass", "s3cret")) as proc:
        url = proc.url.replace("unix://", "unix://:s3cret@") + "?db=3"
        mux = MuxRedis(url)
        try:
            await mux.call(("SET", "k", "v"))
            info = await mux.call(("CLIENT", "INFO"))
            assert isinstance(info, str) and " db=3 " in f" {info} ", info
            keyspace = await mux.call(("INFO", "keyspace"))
            assert isinstance(keyspace, str)
            assert "db3:keys=1," in keyspace and "db0:" not in keyspace, keyspace
            bad = MuxRedis(proc.url)
            with pytest.raises(RedisUnavailable, match=r"NOAUTH|Authentication"):
                reply = await bad.evalsha("0" * 40, "return 1", [], [])
                del reply
            await bad.close()
        finally:
            await mux.close()
