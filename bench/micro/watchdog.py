"""``python -m bench.micro.watchdog``: server CPU per request with and without the watchdog.

Why this exists: gateway/server.py wraps aiohttp's request handler with a
per-connection slow-client watchdog and a connection cap, and claims the
watchdog is free on busy keep-alive connections ("the timer is lazy ... a
busy keep-alive connection costs no timer operations per request").  This
serves the same trivial aiohttp app (one POST route answering fixed bytes,
no access log) through plain ``web.AppRunner`` and through
``GatewayRunner``, each in its own process on the server CPU, drives both
with the load generator (closed loop) from the other CPU, and prints the
server process's CPU per request at each connection count, so the claim and
its cost at many connections can be re-checked.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence

from bench.client import build_request
from bench.loadgen import LoadSpec, _new_loop, run_load
from bench.micro.common import Row, add_common, emit, where
from bench.report import machine_info
from bench.stack import CpuPlan, ManagedProcess, cpu_plan, free_port, wait_http

BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'
ANSWER = b'{"jsonrpc":"2.0","id":1,"result":"0x1"}'


async def _serve(kind: str, port: int) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application()
    app.router.add_post("/", handle)
    runner: web.AppRunner
    if kind == "gateway":
        from gateway import typedefs as T
        from gateway.config import config_from_dict
        from gateway.server.listener import GatewayRunner

        app[T.CONFIG] = config_from_dict({"server": {"access_log": False}})
        runner = GatewayRunner(app)
    else:
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


async def _one(kind: str, connections: int, seconds: float, plan: CpuPlan) -> Row:
    port = free_port()
    argv = [sys.executable, "-m", "bench.micro.watchdog", "--serve", kind, "--port", str(port)]
    server = ManagedProcess(f"{kind} server", argv, cpus=plan.server)
    await server.start(read_url=True)
    try:
        await wait_http(server.url + "/", server, method="POST")
        spec = LoadSpec(
            host="127.0.0.1",
            port=port,
            requests=(build_request("127.0.0.1", port, "/", BODY),),
            duration_s=seconds,
            connections=connections,
            cpus=plan.others,
        )
        await run_load(dataclasses.replace(spec, duration_s=0.3), progress=False)  # warm-up
        cpu0 = server.cpu_seconds()
        res = await run_load(spec, progress=False)
        cpu = server.cpu_seconds() - cpu0
    finally:
        await server.stop()
    name = "GatewayRunner (watchdog, cap)" if kind == "gateway" else "web.AppRunner"
    return Row(f"{name}, {connections} conns", res.kinds["ok"], res.duration_s, cpu, {})


async def measure(connections: list[int], seconds: float, plan: CpuPlan) -> tuple[str, list[Row]]:
    rows = [
        await _one(kind, n, seconds, plan) for n in connections for kind in ("plain", "gateway")
    ]
    return f"closed loop; {where(plan, 'load generator', 'server')}", rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro.watchdog", description=__doc__)
    p.add_argument(
        "--connections", type=int, action="append", help="repeatable (default 64 and 1024)"
    )
    p.add_argument("--serve", choices=("plain", "gateway"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    add_common(p)
    args = p.parse_args(argv)
    loop = _new_loop()
    try:
        if args.serve:
            loop.run_until_complete(_serve(args.serve, args.port))
            return 0
        machine = machine_info()
        conns = args.connections or [64, 1024]
        setup, rows = loop.run_until_complete(measure(conns, args.seconds, cpu_plan()))
    finally:
        loop.close()
    emit(
        "Server CPU per request, aiohttp runner vs GatewayRunner",
        setup,
        rows,
        as_json=args.json,
        params=vars(args),
        machine=machine,
        cpu_label="server CPU µs/req",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
