"""``python -m bench.micro.redismux``: CPU per EVALSHA, redis.asyncio vs MuxRedis.

Why this exists: gateway/redismux.py replaces redis.asyncio for the one
Redis call on every request (the admission script), claiming that
redis-py's pool checkout, command packing and per-reply reads cost ~85-110
µs of client CPU per call.  This runs the same ``EVALSHA`` (one key and
``--args`` arguments, the shape of admit.lua's call) through both clients,
closed loop at the same concurrency, against a redis-server in another
process on another CPU, and prints the client's CPU per call and Redis's own
(``INFO cpu``) per call: the second is the figure to bring down to
10 µs, and it shows what argument count alone costs Redis.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from bench.loadgen import _new_loop
from bench.micro.common import (
    Row,
    add_common,
    closed_loop,
    emit,
    pin_self,
    private_redis,
    where,
)
from bench.partcpu import redis_info_cpu
from bench.stack import CpuPlan
from gateway.redis.mux import MuxRedis

# Touches one hash like the admission script does; the arguments ride along.
SCRIPT = "local n = redis.call('HINCRBY', KEYS[1], 'n', 1) return {1, n, #ARGV}"
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()
KEY = "bench:micro:redismux"


async def _timed(
    name: str, call: Callable[[], Awaitable[Any]], port: int, concurrency: int, seconds: float
) -> Row:
    await closed_loop(call, concurrency, 0.3, warmup_s=0.0)  # connections, caches
    before = await redis_info_cpu(port)
    calls, wall, cpu = await closed_loop(call, concurrency, seconds, warmup_s=0.0)
    after = await redis_info_cpu(port)
    redis_us = None
    if before is not None and after is not None and calls:
        redis_us = (after - before) * 1e6 / calls
    return Row(name, calls, wall, cpu, {"Redis CPU µs/call": redis_us})


async def with_redis_py(port: int, args: list[str], concurrency: int, seconds: float) -> Row:
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0", decode_responses=True)
    try:
        await client.script_load(SCRIPT)

        async def call() -> Any:
            return await client.evalsha(SHA, 1, KEY, *args)

        return await _timed("redis.asyncio Redis.evalsha", call, port, concurrency, seconds)
    finally:
        await client.aclose()


async def with_mux(port: int, args: list[str], concurrency: int, seconds: float) -> Row:
    client = MuxRedis(f"redis://127.0.0.1:{port}/0")
    try:

        async def call() -> Any:
            return await client.evalsha(SHA, SCRIPT, (KEY,), args)

        await call()  # NOSCRIPT once: loads the script
        return await _timed("gateway MuxRedis.evalsha", call, port, concurrency, seconds)
    finally:
        await client.close()


async def measure(
    n_args: int, concurrency: int, seconds: float, plan: CpuPlan
) -> tuple[str, list[Row]]:
    args = [f"arg{i}" for i in range(n_args)]
    async with private_redis(plan, "redis") as port:
        rows = [
            await with_redis_py(port, args, concurrency, seconds),
            await with_mux(port, args, concurrency, seconds),
        ]
    setup = (
        f"EVALSHA with 1 key and {n_args} args, {concurrency} concurrent callers; "
        f"{where(plan, 'redis-server')}"
    )
    return setup, rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro.redismux", description=__doc__)
    p.add_argument("--concurrency", type=int, default=64, help="callers in flight")
    p.add_argument("--args", type=int, default=20, help="script arguments per call")
    add_common(p)
    opts = p.parse_args(argv)
    plan, machine = pin_self()
    loop = _new_loop()
    try:
        setup, rows = loop.run_until_complete(
            measure(opts.args, opts.concurrency, opts.seconds, plan)
        )
    finally:
        loop.close()
    emit(
        "Redis EVALSHA CPU per call",
        setup,
        rows,
        as_json=opts.json,
        params=vars(opts),
        machine=machine,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
