"""``python -m bench.micro.callpath``: the packages one call crosses, followed from the door.

A reader who follows one call from ``RpcHttp.serve`` to its answer should
walk down the packages and back, not zig-zag: a step that calls into
another package for every small piece (``rpc`` asking ``intel`` four
things about one read) or a lower package that calls back up into ``rpc``
makes the path hard to follow and every piece a place to change. This
counts it, instead of reading it: one real HTTP request through the shipped
door (a ``GatewayRunner`` on a loopback port, in this process, against a
real Redis and a real mock chain node, as ``bench.micro.pipeline`` builds
them), under ``sys.setprofile``. Every fresh call (not a coroutine's
resumption) whose callee is a ``gateway`` module is tallied by the package
of its caller and of its callee (``gateway.rpc.reads`` is ``rpc``, the
top-level ``gateway.app`` is ``app``); a call the event loop makes (a task
a gateway step started, a callback) has the caller ``loop``.

Two figures per shape follow from the tally:

* **climbs into rpc**: calls into ``rpc`` from a package that does not
  import it (``intel``, ``upstream``, ``limits``, ...: it can only be
  calling back something it was handed), or from the event loop (a task such
  a package started, as ``intel.coalesce`` runs a read's node call): the
  path going back up. The door (``server``, which imports ``rpc``) calling
  ``serve`` and asking for the answer's headers is the path coming down;
* **calls out of rpc**: calls from ``rpc`` into another package, each a trip
  down and back (so a read step that asks ``intel`` many small things shows
  here); shown for what it is, not a fault.

Shapes: a cache hit (a final block by number, asked before) and a cache
miss (a final block not asked before: admitted, planned, coalesced, sent to
the node, settled and kept). The figures are counts, the same on any
machine and however busy it is. The client keeps one connection alive, as
RPC libraries do, and makes ``WARM`` calls first, so the key spends an
admission lease as a busy key does (a lease refill from Redis adds its calls
to the rare request that makes it; the figure is the median of ``--requests``).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from aiohttp import web

from bench.loadgen import _new_loop
from bench.micro.common import pin_self, private_redis
from bench.micro.pipeline import FINAL, HEAD, bench_config
from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.chainnode import Chain, start_chain_node
from gateway.rpc.http import RpcHttp
from gateway.server.listener import GatewayRunner

_SERVE = RpcHttp.serve.__code__
WARM = 300  # hits before the count: a key this busy spends a lease, as a busy key does
Edge = tuple[str, str]  # (caller's package, callee's package)


def _above(unit: str) -> frozenset[str]:
    """The gateway packages (and top-level modules) that import ``unit``: those above it.

    A call into ``unit`` from any other package can only be a callback or a
    task it was handed, which is the path climbing back up.
    """
    root = Path(__file__).resolve().parents[2] / "gateway"
    found: set[str] = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        package = rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                f"gateway.{unit}"
            ):
                found.add(package)
    return frozenset(found - {unit})


def _unit(frame: FrameType | None) -> str:
    """The gateway package a frame runs in ("" outside the gateway, "loop" for None)."""
    if frame is None:
        return "loop"
    name = str(frame.f_globals.get("__name__", ""))
    if not name.startswith("gateway."):
        return ""
    return name.split(".")[1]


class Tally:
    """The cross-package calls made while ``profile`` is installed."""

    def __init__(self) -> None:
        self.edges: Counter[Edge] = Counter()
        self.gateway_calls = 0
        self._seen: set[FrameType] = set()  # frames already running: a later call is a resume

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame in self._seen:
            return
        self._seen.add(frame)
        callee = _unit(frame)
        if not callee:
            return
        self.gateway_calls += 1
        caller = _unit(frame.f_back) or "loop"  # asyncio's own frames run tasks and callbacks
        if caller != callee and frame.f_code is not _SERVE:
            self.edges[(caller, callee)] += 1

    def climbs(self, unit: str, above: frozenset[str]) -> int:
        """Calls into ``unit`` from a package that does not import it, or from the loop."""
        return sum(n for (a, b), n in self.edges.items() if b == unit and a not in above)

    def out_of(self, unit: str) -> int:
        return sum(n for (a, b), n in self.edges.items() if a == unit and b != unit)


class _Client:
    """One keep-alive HTTP/1.1 connection, as an RPC client library keeps."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status, *lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        assert status.split(b" ")[1] == b"200", status
        length = next(
            int(v)
            for k, _, v in (ln.partition(b":") for ln in lines)
            if k.lower() == b"content-length"
        )
        return await self.reader.readexactly(length)


def _call(block: str) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": [block, False]}
    ).encode()


async def measure(requests: int) -> dict[str, list[Tally]]:
    plan, _ = pin_self()
    async with private_redis(plan, "callpath") as redis_port:
        node = await start_chain_node(Chain(chain_id=56, start=HEAD, finality_depth=3))
        other = await start_chain_node(Chain(chain_id=204, start=HEAD))
        server = {"access_log": False, "metrics_listen": ""}
        cfg = bench_config(redis_port, "callpath", node.url, other.url, server=server)
        app = create_app(cfg)
        runner = GatewayRunner(app)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = int(runner.addresses[0][1])
            account = await app[T.STORE].create_account("path@example.com", "path password")
            key, _ = await app[T.STORE].create_key(account.id, name="path")
            await app[T.POOLS]["bsc"].probe_once()
            path = f"/bsc/{key}"
            client = _Client(*await asyncio.open_connection("127.0.0.1", port))
            for _ in range(WARM):  # fills the cache; the key's rate sizes its admission lease
                await client.post(path, _call(FINAL))
            found: dict[str, list[Tally]] = {"cache hit": [], "cache miss": []}
            for i in range(requests):
                for shape, block in (("cache hit", FINAL), ("cache miss", hex(HEAD - 20 - i))):
                    tally = Tally()
                    sys.setprofile(tally.profile)
                    try:
                        await client.post(path, _call(block))
                    finally:
                        sys.setprofile(None)
                    found[shape].append(tally)
            client.writer.close()
            return found
        finally:
            await runner.cleanup()
            await node.close()
            await other.close()


def _row(shape: str, tallies: list[Tally], above: frozenset[str]) -> dict[str, Any]:
    """The median request of ``tallies`` (by gateway calls), with its figures."""
    middle = sorted(tallies, key=lambda t: t.gateway_calls)[len(tallies) // 2]
    return {
        "shape": shape,
        "requests": len(tallies),
        "gateway_calls": middle.gateway_calls,
        "gateway_calls_median": statistics.median(t.gateway_calls for t in tallies),
        "climbs_into_rpc": middle.climbs("rpc", above),
        "out_of_rpc": middle.out_of("rpc"),
        "edges": {f"{a} -> {b}": n for (a, b), n in sorted(middle.edges.items())},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.micro.callpath",
        description="The gateway packages one HTTP call crosses, followed from RpcHttp.serve "
        "through the shipped door: a cache hit and a cache miss, counted under sys.setprofile.",
    )
    p.add_argument("--requests", type=int, default=9, help="requests per shape (median kept)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    loop = _new_loop()
    try:
        found = loop.run_until_complete(measure(args.requests))
    finally:
        loop.close()
    above = _above("rpc")
    rows = [_row(shape, tallies, above) for shape, tallies in found.items()]
    if args.json:
        print(json.dumps({"benchmark": "packages one call crosses", "rows": rows}, indent=2))
        return
    for row in rows:
        print(
            f"{row['shape']}: {row['gateway_calls']} gateway calls, "
            f"climbs into rpc {row['climbs_into_rpc']}, calls out of rpc {row['out_of_rpc']}"
        )
        for edge, n in row["edges"].items():
            print(f"    {edge:<28} {n:>3}")


if __name__ == "__main__":
    main()
