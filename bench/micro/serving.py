"""``python -m bench.micro.serving``: what the HTTP serving stack alone costs per request.

Why this exists: the goal is 1.5x the bare aiohttp proxy per core,
and the profile of the pinned gateway worker puts most of what is left in
aiohttp's serving stack, not in the gateway's own steps. This serves one
trivial POST (fixed answer bytes, the gateway's four response headers, no
access log) through four stacks, each in its own process on the server CPU,
drives them with the load generator (closed loop) from the other CPU, and
prints the server's CPU per request:

* ``app``: ``web.Application`` with a ``/bsc/{key}`` route, as the gateway
  serves RPC today (router, ``Application._handle``, ``web.Request``);
* ``lowlevel``: aiohttp's low-level ``web.Server`` with the handler called
  directly (no router, no application), what the issue suggested trying;
* ``gateway``: the same application under ``GatewayRunner`` (watchdog, cap);
* ``lean``: ``GatewayRunner`` with ``server.door = "lean"``: the gateway's
  lean door (gateway/server/door.py) with a stand-in for the RPC handler
  that answers the fixed bytes through the door's own writes. It writes
  the gateway's full header set (CORS, RateLimit, X-Gateway-*: six
  headers, two more than the others);
* ``raw``: an ``asyncio.Protocol`` on aiohttp's C request parser writing
  the answer's bytes itself: no request or response objects. Not a server
  (no keep-alive timer, no pipelining order, no errors): the floor that a
  hand-written RPC fast path could approach, nothing more.

The difference between ``app`` and ``raw`` bounds what replacing aiohttp's
request/response machinery for RPC paths could save per request.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from bench.client import build_request
from bench.loadgen import LoadSpec, _new_loop, run_load
from bench.micro.common import Row, add_common, emit, where
from bench.report import machine_info
from bench.stack import CpuPlan, ManagedProcess, cpu_plan, free_port, wait_http

STACKS = ("app", "lowlevel", "gateway", "lean", "raw")
PATH = "/bsc/" + "k" * 32
BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
ANSWER = b'{"jsonrpc":"2.0","id":1,"result":"0x38"}'
HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "RateLimit, RateLimit-Policy, Retry-After",
    "RateLimit-Policy": '"burst";q=50;w=1',
    "RateLimit": '"burst";r=49;t=1',
}
RAW_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in HEADERS.items())
    + b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
)


async def _serve(stack: str, port: int) -> None:
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json", headers=HEADERS)

    if stack == "raw":
        await _serve_raw(port)
    elif stack == "lean":
        await _serve_lean(port, handle)
    elif stack == "lowlevel":
        loop = asyncio.get_running_loop()
        await loop.create_server(web.Server(handle, access_log=None), "127.0.0.1", port)
    else:
        app = web.Application()
        app.router.add_route("*", "/bsc/{key}", handle)
        runner: web.AppRunner
        if stack == "gateway":
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


async def _serve_lean(port: int, handle: Any) -> None:
    from types import SimpleNamespace

    from aiohttp import web

    from gateway import typedefs as T
    from gateway.app import HANDLERS
    from gateway.config import config_from_dict
    from gateway.rpc.replies import Answer
    from gateway.server.listener import GatewayRunner

    class Fixed:  # stands in for RpcHttp: the fixed answer, no pipeline
        network = SimpleNamespace(prefix="/bsc")
        max_body = 1 << 20

        async def serve(self, request: Any, out: Any) -> Any:
            await request.content.read()  # the whole body, as the adapter reads it
            return out.whole(Answer(ANSWER, 200, {k: HEADERS[k] for k in list(HEADERS)[2:]}))

    app = web.Application()
    app.router.add_route("*", "/bsc/{key}", handle)
    app[T.CONFIG] = config_from_dict({"server": {"access_log": False, "door": "lean"}})
    app[HANDLERS] = [Fixed()]  # type: ignore[misc]
    runner = GatewayRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()


async def _serve_raw(port: int) -> None:
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.http_parser import HttpRequestParser

    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    class Raw(BaseProtocol):  # aiohttp's flow control, which the parser's payloads call
        def __init__(self) -> None:
            super().__init__(loop)
            self.parser = HttpRequestParser(self, loop, 2**16)

        def data_received(self, data: bytes) -> None:
            messages, _, _ = self.parser.feed_data(data)
            for _, payload in messages:
                task = loop.create_task(self.answer(payload))
                running.add(task)
                task.add_done_callback(running.discard)

        async def answer(self, payload: Any) -> None:
            await payload.read()
            if self.transport is not None:
                self.transport.write(RAW_ANSWER)

    await loop.create_server(Raw, "127.0.0.1", port)


async def _one(stack: str, connections: int, seconds: float, plan: CpuPlan) -> Row:
    port = free_port()
    argv = [sys.executable, "-m", "bench.micro.serving", "--serve", stack, "--port", str(port)]
    server = ManagedProcess(f"{stack} server", argv, cpus=plan.server)
    await server.start(read_url=True)
    try:
        await wait_http(server.url + PATH, server, method="POST")
        spec = LoadSpec(
            host="127.0.0.1",
            port=port,
            requests=(build_request("127.0.0.1", port, PATH, BODY),),
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
    return Row(f"{stack}, {connections} conns", res.kinds["ok"], res.duration_s, cpu, {})


async def measure(
    stacks: Sequence[str], connections: int, seconds: float, rounds: int, plan: CpuPlan
) -> tuple[str, list[Row]]:
    rows = [await _one(s, connections, seconds, plan) for _ in range(rounds) for s in stacks]
    return (
        f"closed loop, {rounds} interleaved round(s); {where(plan, 'load generator', 'server')}",
        rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro.serving", description=__doc__)
    p.add_argument("--connections", type=int, default=64, help="keep-alive connections")
    p.add_argument("--rounds", type=int, default=2, help="stacks run A B C D A B C D ...")
    p.add_argument("--stack", action="append", choices=STACKS, help="repeatable (default: all)")
    p.add_argument("--serve", choices=STACKS, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    add_common(p)
    args = p.parse_args(argv)
    loop = _new_loop()
    try:
        if args.serve:
            loop.run_until_complete(_serve(args.serve, args.port))
            return 0
        machine = machine_info()
        stacks = args.stack or list(STACKS)
        setup, rows = loop.run_until_complete(
            measure(stacks, args.connections, args.seconds, args.rounds, cpu_plan())
        )
    finally:
        loop.close()
    emit(
        "Server CPU per request of the serving stack alone (fixed answer)",
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
