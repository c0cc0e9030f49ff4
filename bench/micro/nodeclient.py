"""``python -m bench.micro.nodeclient``: CPU per request of the lean HTTP clients vs aiohttp's.

Why this exists: two hand-written HTTP/1.1 clients replace
``aiohttp.ClientSession`` on hot paths.  gateway/nodeclient.py forwards every
call to a node (its docstring: the session hop was 37 % of the gateway's
samples); bench/client.py is the load generator's client, which must be much
cheaper than the server it loads.  This measures all three the same way
(closed loop, keep-alive, same concurrency, against a mock node in another
process on another CPU) and prints client CPU microseconds per request, so
both choices can be re-checked on any machine.  (Formerly
``python -m bench.clientcost``, which still works.)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import aiohttp

from bench.client import build_request
from bench.loadgen import LoadSpec, _new_loop
from bench.loadworker import _Worker
from bench.micro.common import Row, add_common, closed_loop, emit, pin_self, where
from bench.stack import CpuPlan, ManagedProcess
from gateway.upstream.nodeclient import NodeClient

BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'


async def gateway_client(url: str, connections: int, seconds: float) -> Row:
    """gateway/nodeclient.py: the gateway's forwarding hop."""
    client = NodeClient(url, max_connections=connections)
    try:
        calls, wall, cpu = await closed_loop(lambda: client.post(BODY, 5.0), connections, seconds)
    finally:
        await client.close()
    return Row("gateway NodeClient (lean)", calls, wall, cpu, {})


async def generator_client(url: str, connections: int, seconds: float) -> Row:
    """bench/client.py driven by the generator's own worker loop."""
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
    cpu0, t0 = time.process_time(), time.monotonic()
    stats = await worker.run(time.monotonic(), lambda st: None)
    return Row(
        "bench generator client (lean)",
        stats.kinds["ok"],
        time.monotonic() - t0,
        time.process_time() - cpu0,
        {},
    )


async def aiohttp_session(url: str, connections: int, seconds: float) -> Row:
    """One shared aiohttp.ClientSession, as the gateway used before the lean client."""
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def call() -> None:
            async with session.post(url, data=BODY, headers=headers) as resp:
                await resp.read()

        calls, wall, cpu = await closed_loop(call, connections, seconds)
    return Row("aiohttp ClientSession", calls, wall, cpu, {})


async def measure(connections: int, seconds: float, plan: CpuPlan) -> tuple[str, list[Row]]:
    node = ManagedProcess(
        "mocknode", [sys.executable, "-m", "bench.mocknode", "--block-time", "0"], cpus=plan.others
    )
    await node.start(read_url=True)
    try:
        rows = [
            await client(node.url, connections, seconds)
            for client in (gateway_client, generator_client, aiohttp_session)
        ]
    finally:
        await node.stop()
    return f"mock node {node.url}; {where(plan, 'mock node')}; {connections} connections", rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro.nodeclient", description=__doc__)
    p.add_argument("--connections", type=int, default=32)
    add_common(p)
    args = p.parse_args(argv)
    plan, machine = pin_self()
    loop = _new_loop()
    try:
        setup, rows = loop.run_until_complete(measure(args.connections, args.seconds, plan))
    finally:
        loop.close()
    emit(
        "HTTP client CPU per request",
        setup,
        rows,
        as_json=args.json,
        params=vars(args),
        machine=machine,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
