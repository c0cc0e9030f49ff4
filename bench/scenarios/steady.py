"""Steady load, alone or side by side with baselines (interleaved rounds)."""

from __future__ import annotations

import argparse
from typing import Any

from bench import report as rpt
from bench import verdicts as v
from bench.loadgen import LoadResult
from bench.scenarios.common import (
    base_report,
    cpu_of,
    delta,
    environment,
    finish,
    load_spec,
    log,
    run_with_events,
    total_or_none,
)
from bench.stack import (
    BENCH_PLAN,
    ManagedProcess,
)

STEADY = (
    "Steady load at a constant arrival rate (open loop; --closed for maximum throughput). "
    "With --vs, the same load runs against baselines too, interleaved A B A B so machine "
    "noise cancels, and every figure gets a gateway/baseline ratio."
)


async def steady(args: argparse.Namespace) -> dict[str, Any]:
    baselines = [b.strip() for b in (args.vs or "").split(",") if b.strip()]
    async with environment(args, proxy="proxy" in baselines) as env:
        plan = args.plan or (BENCH_PLAN if env.local else "payg")
        keys = [k for k, _ in await env.keys(args.keys, plan)]
        targets: dict[str, tuple[str, ManagedProcess | None]] = {
            "gateway": (env.gateway_url, env.stack.gateway if env.stack else None)
        }
        for b in baselines:
            if "=" in b and not b.startswith("door="):
                name, url = b.split("=", 1)
                targets[name] = (url, None)
            elif env.stack is None:
                raise SystemExit(f"bench: --vs {b} needs the local stack; use --vs NAME=URL")
            elif b == "proxy":
                assert env.stack.proxy is not None
                targets["proxy"] = (env.stack.proxy.url, env.stack.proxy)
            elif b in ("door=app", "door=lean"):
                door = b.partition("=")[2]
                second = await env.stack.start_second_gateway(door)
                targets[f"gateway-{door}"] = (second.url, second)
            elif b == "direct":
                node = env.stack.nodes[args.network][0]
                targets["direct"] = (node.url, node)
            else:
                raise SystemExit(f"bench: unknown baseline {b!r} (proxy, direct, NAME=URL)")
        rounds = args.rounds or (3 if baselines else 1)
        results: dict[str, list[LoadResult]] = {name: [] for name in targets}
        cpu: dict[str, list[float | None]] = {name: [] for name in targets}
        redis_cpu: list[float | None] = []
        redis = env.stack.redis if env.stack is not None else None
        for r in range(rounds):  # interleaved: A B A B ...
            for name, (url, proc) in targets.items():
                spec = load_spec(args, env, url, keys)
                before, redis_before = cpu_of(proc), cpu_of(redis)
                label = f"{name} {r + 1}/{rounds}" if rounds > 1 else name
                res, _ = await run_with_events(
                    spec, [], progress=not args.quiet, label=label, stack=env.stack
                )
                results[name].append(res)
                cpu[name].append(delta(cpu_of(proc), before))
                if name == "gateway":
                    redis_cpu.append(delta(cpu_of(redis), redis_before))
                log(_one_line(name, res))
        report = base_report("steady", STEADY, args, env)
        for name in targets:
            report["targets"][name] = rpt.summarize(
                results[name],
                server_cpu_s=total_or_none(cpu[name]),
                redis_cpu_s=total_or_none(redis_cpu) if name == "gateway" else None,
            )
        for name in targets:
            if name != "gateway":
                report["ratios"][f"gateway/{name}"] = v.side_by_side_ratios(
                    report["targets"]["gateway"], report["targets"][name]
                )
        for name in targets:  # the second gateway (door=...) against each plain baseline
            if name.startswith("gateway-"):
                for base in targets:
                    if not base.startswith("gateway"):
                        report["ratios"][f"{name}/{base}"] = v.side_by_side_ratios(
                            report["targets"][name], report["targets"][base]
                        )
        if rounds > 1:
            for name in targets:
                tp = report["targets"][name]["round_throughput_rps"]
                report["figures"][f"{name} throughput spread over rounds (min/max)"] = (
                    f"{min(tp):,.0f} / {max(tp):,.0f} req/s"
                )
        gw = report["targets"]["gateway"]
        checks = [
            v.check(
                "error rate",
                gw["error_rate"] <= args.max_error_rate,
                f"{gw['error_rate'] * 100:.3f}% (allowed {args.max_error_rate * 100:g}%): "
                f"{gw['errors'] or 'none'}",
            )
        ]
        return finish(report, checks)


def _one_line(name: str, res: LoadResult) -> str:
    ok = res.latency(("ok",))
    return (
        f"{name}: {res.completed / res.duration_s:,.0f} req/s answered, "
        f"p50 {ok.percentile_ms(50):.2f} ms, p99 {ok.percentile_ms(99):.2f} ms, "
        f"kinds {dict(res.kinds)}"
    )
