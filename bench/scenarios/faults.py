"""Fault scenarios: an upstream node failing, Redis restarting, under load."""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from bench import report as rpt
from bench import verdicts as v
from bench.loadgen import LoadResult
from bench.scenarios.common import (
    Env,
    base_report,
    environment,
    finish,
    load_spec,
    log,
    run_with_events,
)
from bench.stack import (
    BENCH_PLAN,
)

NODE_FAILURE = (
    "Steady load while one upstream node fails (--mode kill: process killed, connections "
    "refused; hang: SIGSTOP, connections accepted but never answered) and comes back after "
    "--outage. Counts client-visible errors during and after the outage; a gateway with "
    "several healthy nodes should retry and hide the failure."
)


async def node_failure(args: argparse.Namespace) -> dict[str, Any]:
    async with environment(args, bsc_nodes=2) as env:
        plan = args.plan or (BENCH_PLAN if env.local else "payg")
        keys = [k for k, _ in await env.keys(1, plan)]
        fail, recover = _node_actions(args, env)
        spec = load_spec(args, env, env.gateway_url, keys)
        res, events = await run_with_events(
            spec,
            [(args.fail_at, f"node {args.mode}", fail),
             (args.fail_at + args.outage, "node back", recover)],
            progress=not args.quiet,
            label="node-failure",
            stack=env.stack,
        )  # fmt: skip
        report = base_report("node-failure", NODE_FAILURE, args, env)
        report["targets"]["gateway"] = rpt.summarize([res])
        report["events"] = [{k: e[k] for k in ("t_s", "what")} for e in events]
        report["timeline"] = rpt.timeline(res)
        figures, checks = outage_verdict(
            res, events[0]["t_s"], events[3]["t_s"], args.max_error_rate, args.settle
        )
        report["figures"].update(figures)
        return finish(report, checks)


def _node_actions(
    args: argparse.Namespace, env: Env
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    if args.fail_cmd or env.stack is None:
        return _shell_actions(args)
    stack = env.stack
    node = stack.nodes[args.network][0]

    async def fail() -> None:
        if args.mode == "kill":
            await node.kill()
        else:
            node.signal(signal.SIGSTOP)

    async def recover() -> None:
        if args.mode == "kill":
            await stack.restart_node(node)
        else:
            node.signal(signal.SIGCONT)

    return fail, recover


def _shell_actions(
    args: argparse.Namespace,
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    if not args.fail_cmd or not args.recover_cmd:
        raise SystemExit("bench: against --target, give --fail-cmd and --recover-cmd")

    def action(cmd: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            proc = await asyncio.create_subprocess_shell(cmd)
            if await proc.wait() != 0:
                log(f"warning: `{cmd}` exited with {proc.returncode}")

        return run

    return action(args.fail_cmd), action(args.recover_cmd)


def outage_verdict(
    res: LoadResult, t_fail: float, t_back: float, max_error_rate: float, settle_s: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Errors before, during and after an outage, and when they stopped."""
    step = res.spec.timeline_step_s
    before = v.window_counts(res.timeline, step, 0.0, t_fail)
    during = v.window_counts(res.timeline, step, t_fail, t_back + settle_s)
    after = v.window_counts(res.timeline, step, t_back + settle_s, math.inf)
    bad = [k for k in res.kinds if k not in v.ADMITTED_KINDS]
    last_bad = v.last_time(res.timeline, step, bad, after=t_fail)
    rate_during = v.error_fraction(during)
    errors_after = sum(n for k, n in after.items() if k in bad)
    figures: dict[str, Any] = {
        "errors before the failure": sum(n for k, n in before.items() if k in bad),
        "error rate from failure to recovery+settle": v.error_fraction(during),
        "errors from failure to recovery+settle": sum(n for k, n in during.items() if k in bad),
        "errors after recovery+settle": sum(n for k, n in after.items() if k in bad),
        "last error, s after the failure": None if last_bad is None else last_bad - t_fail,
        "p99 ms before": _phase_p99(res, 0.0, t_fail),
        "p99 ms during outage": _phase_p99(res, t_fail, t_back),
        "p99 ms after recovery": _phase_p99(res, t_back + settle_s, math.inf),
        "error kinds during": ", ".join(f"{k}={n}" for k, n in sorted(during.items()) if k in bad)
        or "none",
    }
    figures["slowest answer (ms)"] = res.latency().max_ms()
    figures["answers slower than 1 s"] = res.latency().count_above_ms(1000.0)
    checks = [
        v.check(
            "errors during the outage",
            rate_during <= max_error_rate,
            f"{rate_during * 100:.2f}% (allowed {max_error_rate * 100:g}%)",
        ),
        v.check(
            "clean after recovery",
            errors_after == 0,
            f"{errors_after} errors later than {settle_s:g} s after recovery",
        ),
    ]
    return figures, checks


def _phase_p99(res: LoadResult, t0: float, t1: float) -> float | None:
    from bench.hist import LatencyHistogram

    merged = LatencyHistogram()
    for second, hist in res.second_hists.items():
        if t0 <= second and second + 1 <= t1:
            merged.merge(hist)
    return merged.percentile_ms(99.0) if merged.count else None


REDIS_RESTART = (
    "Steady load while Redis goes away (--mode kill: SIGKILL; term: clean shutdown) and "
    "comes back after --outage. By default the gateway fails closed (503) while Redis is "
    "down, must not crash, and must recover by itself; the run reports ms from the restart "
    "to the first and the last error-free second."
)


async def redis_restart(args: argparse.Namespace) -> dict[str, Any]:
    async with environment(args) as env:
        plan = args.plan or (BENCH_PLAN if env.local else "payg")
        keys = [k for k, _ in await env.keys(1, plan)]
        fail, recover = _redis_actions(args, env)
        spec = load_spec(args, env, env.gateway_url, keys)
        res, events = await run_with_events(
            spec,
            [(args.fail_at, f"redis {args.mode}", fail),
             (args.fail_at + args.outage, "redis back", recover)],
            progress=not args.quiet,
            label="redis-restart",
            stack=env.stack,
        )  # fmt: skip
        report = base_report("redis-restart", REDIS_RESTART, args, env)
        report["targets"]["gateway"] = rpt.summarize([res])
        report["events"] = [{k: e[k] for k in ("t_s", "what")} for e in events]
        report["timeline"] = rpt.timeline(res)
        alive = env.stack.gateway.alive if env.stack and env.stack.gateway else None
        figures, checks = redis_verdict(
            res, events[0]["t_s"], events[3]["t_s"], args.max_recovery, alive
        )
        report["figures"].update(figures)
        return finish(report, checks)


def _redis_actions(
    args: argparse.Namespace, env: Env
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    if args.fail_cmd or env.stack is None:
        return _shell_actions(args)
    stack = env.stack
    assert stack.redis is not None
    redis = stack.redis

    async def fail() -> None:
        await (redis.kill() if args.mode == "kill" else redis.stop())

    return fail, stack.start_redis


def redis_verdict(
    res: LoadResult, t_down: float, t_up: float, max_recovery_s: float, alive: bool | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    step = res.spec.timeline_step_s
    bad = [k for k in res.kinds if k not in v.ADMITTED_KINDS]
    during = v.window_counts(res.timeline, step, t_down, t_up)
    first_bad = v.first_time(res.timeline, step, bad, after=t_down)
    first_ok_after = v.first_time(res.timeline, step, v.ADMITTED_KINDS, after=t_up)
    last_bad = v.last_time(res.timeline, step, bad, after=t_down)
    recovery = None if last_bad is None else max(0.0, last_bad - t_up)
    figures = {
        "first error, ms after redis went down": None
        if first_bad is None
        else (first_bad - t_down) * 1000,
        "first 2xx, ms after redis came back": None
        if first_ok_after is None
        else (first_ok_after - t_up) * 1000,
        "last error, ms after redis came back": None if recovery is None else recovery * 1000,
        "error kinds while down": ", ".join(
            f"{k}={n}" for k, n in sorted(during.items()) if k in bad
        )
        or "none",
        "admitted while down": sum(during.get(k, 0) for k in v.ADMITTED_KINDS),
        "gateway process alive": alive,
    }
    checks = [
        v.check(
            f"recovered within {max_recovery_s:g} s",
            (recovery is not None and recovery <= max_recovery_s) or last_bad is None,
            f"last error {(recovery or 0.0) * 1000:.0f} ms after the restart",
        ),
    ]
    if alive is not None:
        checks.append(v.check("gateway did not crash", alive, "process alive after the run"))
    return figures, checks
