"""Worker scaling: the same closed-loop load per worker against 1..N gateway workers.

Why: adding gateway processes only helps while something else (Redis, the
node, the generator, the machine) has room.  Each worker count gets the same
connections *per worker*, so perfect scaling is a straight line through the
1-worker throughput; the report shows that ideal line, the efficiency at
each count, and the CPU of every part per count, so the part that stops the
line is named rather than guessed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from bench import report as rpt
from bench import verdicts as v
from bench.scenarios.common import (
    base_report,
    environment,
    finish,
    load_spec,
    log,
    run_with_events,
)
from bench.stack import BENCH_PLAN

SCALE = (
    "Closed-loop load against 1, 2, ... N gateway workers (same --connections per worker), "
    "with the ideal line (1-worker throughput x N), the efficiency at each count, and each "
    "part's CPU per request, so the part that stops the scaling is named."
)


def default_max_workers() -> int:
    """min(8, usable CPUs): more workers than CPUs measures only the scheduler."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cpus or 1))


async def scale(args: argparse.Namespace) -> dict[str, Any]:
    if args.target:
        raise SystemExit("bench: scale restarts the gateway with 1..N workers: local stack only")
    counts = list(range(1, (args.max_workers or default_max_workers()) + 1))
    args.closed = True
    args.workers = counts[0]
    async with environment(args) as env:
        stack = env.stack
        assert stack is not None and stack.gateway is not None
        keys = [k for k, _ in await env.keys(args.keys, args.plan or BENCH_PLAN)]
        report = base_report("scale", SCALE, args, env)
        throughput: dict[int, float] = {}
        for n in counts:
            if n != stack.options.gateway_workers:
                await stack.gateway.stop()
                stack.options.gateway_workers = n
                await stack.start_gateway()
            spec = load_spec(args, env, stack.gateway.url, keys)
            spec = dataclasses.replace(spec, connections=max(args.connections * n, spec.processes))
            label = f"{n} worker{'s' if n > 1 else ''}"
            res, _ = await run_with_events(
                spec, [], progress=not args.quiet, label=label, stack=stack
            )
            summary = rpt.summarize([res])
            report["targets"][label] = summary
            throughput[n] = summary["throughput_rps"]
            log(f"{label}: {throughput[n]:,.0f} req/s; at its limit: {summary['at_limit']}")
        server_cpus = len(stack.cpus.server) if stack.cpus.server else None
    rows = v.scale_rows(throughput)
    for row, summary in zip(rows, report["targets"].values(), strict=True):
        row["gateway_cpu_us_per_req"] = sum(
            r["us_per_req"] or 0.0
            for r in summary["cpu_by_part"]
            if r["part"].startswith("gateway")
        )
        row["redis_cpu_us_per_admitted"] = summary["redis_cpu_us_per_admitted"]
        row["at_limit"] = summary["at_limit"]
    report["scale"] = {"rows": rows, "server_cpus": server_cpus}
    if server_cpus is not None and counts[-1] > server_cpus:
        report["notes"].append(
            f"the gateway is pinned to {server_cpus} CPU(s): beyond {server_cpus} worker(s) "
            "the ideal line cannot be reached on this machine (efficiency not judged; "
            "CPU per request still is); --no-pin to unpin."
        )
    last = rows[-1]
    errors = {n: s["error_rate"] for n, s in report["targets"].items()}
    checks = []
    if server_cpus is None or counts[-1] <= server_cpus:
        checks.append(
            v.check(
                f"efficiency at {last['workers']} workers",
                last["efficiency"] >= args.min_efficiency,
                f"{last['efficiency']:.2f} of the ideal {last['ideal_rps']:,.0f} req/s "
                f"(required >= {args.min_efficiency:g})",
            )
        )
    growth = v.cpu_growth(rows)
    if growth is not None:
        worst_n, worst = max(growth.items(), key=lambda kv: abs(kv[1]))
        checks.append(
            v.check(
                f"gateway CPU per request within {args.max_cpu_growth:.0%} of 1 worker's",
                abs(worst) <= args.max_cpu_growth,
                ", ".join(f"{n} workers: {g:+.1%}" for n, g in growth.items())
                + f" (worst at {worst_n})",
            )
        )
    checks.append(
        v.check(
            "error rate",
            max(errors.values()) <= args.max_error_rate,
            ", ".join(f"{n}: {e * 100:.3f}%" for n, e in errors.items()),
        )
    )
    return finish(report, checks)
