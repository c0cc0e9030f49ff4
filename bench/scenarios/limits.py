"""Rate-limit scenarios: one key bursting over its plan, and many keys at once."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench import report as rpt
from bench import verdicts as v
from bench.loadgen import LoadResult
from bench.scenarios.common import (
    base_report,
    environment,
    finish,
    load_spec,
    plan_limits,
    run_with_events,
)

BURST = (
    "One fresh key driven above its plan's rate. A correct token bucket admits "
    "burst + rate*t requests over t seconds; the run prints admitted vs that theoretical "
    "count, their ratio, and whether every 429 carried Retry-After."
)


async def burst(args: argparse.Namespace) -> dict[str, Any]:
    plan = args.plan or "free"
    rate, bucket = plan_limits(args, plan)
    offered = args.rate or max(4 * rate, 100.0)
    async with environment(args) as env:
        keys = [k for k, _ in await env.keys(1, plan)]
        spec = load_spec(args, env, env.gateway_url, keys, rate=offered)
        res, _ = await run_with_events(
            spec, [], progress=not args.quiet, label="burst", stack=env.stack
        )
        report = base_report("burst", BURST, args, env)
        report["targets"]["gateway"] = rpt.summarize([res])
        report["figures"].update(burst_figures(res, rate, bucket, args.batch))
        report["timeline"] = rpt.timeline(res)
        return finish(
            report, [*burst_checks(report["figures"], args.tolerance), v.kept_up(res.kinds)]
        )


def burst_figures(res: LoadResult, rate: float, bucket: int, batch: int) -> dict[str, Any]:
    """Admitted vs theoretical, from one over-limit run of one key."""
    admitted = sum(res.kinds.get(k, 0) for k in v.ADMITTED_KINDS)
    limited = res.kinds.get("http_429", 0)
    window = v.send_window(res.first_sent, res.last_sent)
    sent = sum(n for k, n in res.kinds.items() if v.answered(k))
    theoretical = v.expected_admitted(sent, rate, bucket, window, cost=max(batch, 1))
    return {
        "plan rate (req/s)": rate,
        "plan burst": bucket,
        "requests answered": sent,
        "window t (s, first to last send)": window,
        "admitted (2xx)": admitted,
        "rejected (429)": limited,
        "theoretical burst + rate*t": theoretical,
        "admitted / theoretical": v.ratio(admitted, theoretical),
        "429s with Retry-After": res.retry_after,
        "429s without Retry-After": limited - res.retry_after,
    }


def burst_checks(fig: dict[str, Any], tolerance: float) -> list[dict[str, Any]]:
    admitted, theoretical = fig["admitted (2xx)"], fig["theoretical burst + rate*t"]
    return [
        v.check(
            "admitted matches the token bucket",
            v.within(admitted, theoretical, tolerance),
            f"{admitted} admitted vs {theoretical:.1f} theoretical "
            f"(ratio {v.ratio(admitted, theoretical) or 0.0:.3f}, tolerance ±{tolerance:.0%})",
        ),
        v.check(
            "load was over the limit",
            fig["rejected (429)"] > 0,
            f"{fig['rejected (429)']} requests answered 429",
        ),
        v.check(
            "every 429 carried Retry-After",
            fig["429s without Retry-After"] == 0,
            f"{fig['429s with Retry-After']} with, {fig['429s without Retry-After']} without",
        ),
    ]


MANY_KEYS = (
    "Many keys at once, each at --per-key-rate (default above the free plan's rate): every "
    "key must get its own bucket's share, burst + rate*t (or all it sent when under the "
    "limit), no matter how many other keys are busy."
)


async def many_keys(args: argparse.Namespace) -> dict[str, Any]:
    plan = args.plan or "free"
    rate, bucket = plan_limits(args, plan)
    async with environment(args) as env:
        pairs = await env.keys(args.keys, plan)
        keys = [k for k, _ in pairs]
        spec = load_spec(args, env, env.gateway_url, keys, rate=args.per_key_rate * len(keys))
        res, _ = await run_with_events(
            spec, [], progress=not args.quiet, label="many-keys", stack=env.stack
        )
        report = base_report("many-keys", MANY_KEYS, args, env)
        report["targets"]["gateway"] = rpt.summarize([res])
        figures, checks = many_keys_verdict(
            res, len(keys), rate, bucket, args.batch, args.tolerance
        )
        report["figures"].update(figures)
        return finish(report, checks)


def many_keys_verdict(
    res: LoadResult, n_keys: int, rate: float, bucket: int, batch: int, tolerance: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    window = v.send_window(res.first_sent, res.last_sent)
    ratios: list[float] = []
    outside: list[int] = []
    for k in range(n_keys):
        sent = sum(n for (key, kind), n in res.per_key.items() if key == k and v.answered(kind))
        admitted = sum(res.per_key.get((k, kind), 0) for kind in v.ADMITTED_KINDS)
        expected = v.expected_admitted(sent, rate, bucket, window, cost=max(batch, 1))
        ratios.append(admitted / expected if expected else 0.0)
        if not v.within(admitted, expected, tolerance):
            outside.append(k)
    figures = {
        "keys": n_keys,
        "window t (s)": window,
        "per-key admitted/expected min": min(ratios) if ratios else None,
        "per-key admitted/expected median": statistics.median(ratios) if ratios else None,
        "per-key admitted/expected max": max(ratios) if ratios else None,
        "keys outside tolerance": len(outside),
    }
    unexpected = {
        k: n
        for k, n in res.kinds.items()
        if k not in (*v.ADMITTED_KINDS, "http_429", *v.OVERLOAD_KINDS)
    }
    checks = [
        v.kept_up(res.kinds),
        v.check(
            "every key got its bucket's share",
            not outside,
            f"{n_keys - len(outside)}/{n_keys} keys within ±{tolerance:.0%}"
            + (f"; first outside: key #{outside[0]}" if outside else ""),
        ),
        v.check("no errors besides 429", not unexpected, str(unexpected or "none")),
    ]
    return figures, checks
