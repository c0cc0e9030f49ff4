"""``python -m bench.clientcost``: CPU per request of the lean client vs aiohttp's.

Why this exists: the load generator must be much cheaper than the server it
loads.  This measures both candidate clients the same way (closed loop,
keep-alive, same connections, against a mock node in another process on
another CPU) and prints client CPU microseconds per request, so the choice
in bench/client.py can be re-checked on any machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence

import aiohttp

from bench.client import build_request
from bench.loadgen import LoadSpec, _new_loop, _Worker
from bench.stack import CpuPlan, ManagedProcess, cpu_plan

BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'


async def lean(url: str, connections: int, seconds: float) -> tuple[int, float]:
    """(requests, CPU seconds) for the raw-protocol client (bench/client.py)."""
    host, port = url.removeprefix("http://").split(":")
    spec = LoadSpec(
        host=host,
        port=int(port),
        requests=(build_request(host, int(port), "/", BODY),),
        duration_s=seconds,
        connections=connections,
    )
    worker = _Worker(spec, 0, connections)
    await worker.connect_all()
    cpu0 = time.process_time()
    stats = await worker.run(time.monotonic(), lambda st: None)
    return stats.kinds["ok"], time.process_time() - cpu0


async def with_aiohttp(url: str, connections: int, seconds: float) -> tuple[int, float]:
    """(requests, CPU seconds) for one shared aiohttp.ClientSession."""
    done = 0
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def loop(end: float) -> None:
            nonlocal done
            while time.monotonic() < end:
                async with session.post(url, data=BODY, headers=headers) as resp:
                    await resp.read()
                    done += resp.status == 200

        await asyncio.gather(*(loop(time.monotonic() + 0.2) for _ in range(connections)))
        done = 0
        cpu0 = time.process_time()
        await asyncio.gather(*(loop(time.monotonic() + seconds) for _ in range(connections)))
        return done, time.process_time() - cpu0


async def _main(connections: int, seconds: float, plan: CpuPlan) -> None:
    node = ManagedProcess(
        "mocknode", [sys.executable, "-m", "bench.mocknode", "--block-time", "0"], cpus=plan.others
    )
    await node.start(read_url=True)
    try:
        where = (
            "not pinned"
            if plan.server is None
            else (f"client on CPU {plan.server}, mock node on CPU {plan.others}")
        )
        print(f"mock node {node.url}; {where}")
        for name, client in (
            ("lean (bench/client.py)", lean),
            ("aiohttp ClientSession", with_aiohttp),
        ):
            requests, cpu = await client(node.url, connections, seconds)
            print(
                f"{name:<24} {requests / seconds:>9,.0f} req/s  "
                f"{cpu * 1e6 / max(requests, 1):>6.1f} µs client CPU per request"
            )
    finally:
        await node.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.clientcost", description=__doc__)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args(argv)
    plan = cpu_plan()
    if plan.server is not None:
        os.sched_setaffinity(0, plan.server)  # the client gets the "server" CPU here
    loop = _new_loop()
    try:
        loop.run_until_complete(_main(args.connections, args.seconds, plan))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
