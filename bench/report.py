"""The report: one JSON-able dict per run, rendered as Markdown and a PNG plot.

Everything the Markdown and the plot show comes from the JSON, so the three
outputs cannot disagree, and a saved JSON can be re-rendered later.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import verdicts as v
from bench.hist import LatencyHistogram
from bench.loadgen import LoadResult
from bench.plots import plot
from bench.redact import redact_argv

GENERATOR_BUSY_PCT = 90.0  # above this the generator may be the bottleneck
GENERATOR_LAG_MS = 5.0


def summarize(
    results: Sequence[LoadResult],
    *,
    server_cpu_s: float | None = None,
    redis_cpu_s: float | None = None,
) -> dict[str, Any]:
    """Headline figures of one target, over one or more runs (rounds)."""
    if not results:
        raise ValueError("nothing to summarize")
    spec = results[0].spec
    duration = sum(r.duration_s for r in results)
    kinds: dict[str, int] = {}
    hists: dict[str, LatencyHistogram] = {}
    lag = LatencyHistogram()
    retry_after = 0
    for res in results:
        for kind, n in res.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n
        for kind, hist in res.hists.items():
            hists.setdefault(kind, LatencyHistogram()).merge(hist)
        lag.merge(res.lag)
        retry_after += res.retry_after
    answered = sum(h.count for h in hists.values())
    ok = hists.get("ok", LatencyHistogram())
    every = LatencyHistogram()
    for hist in hists.values():
        every.merge(hist)
    shown = ok if ok.count else every
    total = sum(kinds.values())
    cpu_pct = [100.0 * cpu / r.duration_s for r in results for cpu in r.cpu_s if r.duration_s > 0]
    out: dict[str, Any] = {
        "mode": "open-loop" if spec.rate else "closed-loop",
        "offered_rps": spec.rate * len(results) * spec.duration_s / duration if spec.rate else None,
        "duration_s": duration,
        "rounds": len(results),
        "connections": spec.connections,
        "processes": spec.processes,
        "sent": sum(r.sent for r in results),
        "answered": answered,
        "throughput_rps": answered / duration if duration else 0.0,
        "ok_rps": kinds.get("ok", 0) / duration if duration else 0.0,
        "round_throughput_rps": [r.completed / r.duration_s for r in results],
        "kinds": dict(sorted(kinds.items())),
        "errors": {k: n for k, n in sorted(kinds.items()) if k != "ok"},
        "error_rate": (total - kinds.get("ok", 0)) / total if total else 0.0,
        "retry_after_429s": retry_after,
        "latency_of": "ok" if ok.count else "all answers",
        "latency_ms": shown.summary(),
        "latency_by_kind_ms": {k: h.summary() for k, h in sorted(hists.items())},
        "spectrum": shown.spectrum(),
        "generator": {
            "cpu_pct": [round(p, 1) for p in cpu_pct],
            "lag_p99_ms": lag.percentile_ms(99.0),
        },
        "server_cpu_us_per_req": _per_req(server_cpu_s, answered),
        "redis_cpu_us_per_req": _per_req(redis_cpu_s, answered),
    }
    out.update(cpu_by_part(results, answered, sum(kinds.get(k, 0) for k in v.ADMITTED_KINDS)))
    return out


def cpu_by_part(results: Sequence[LoadResult], answered: int, admitted: int) -> dict[str, Any]:
    """CPU of each part over the runs, the part at its limit, Redis µs per admission.

    Parts are what the scenario attached (bench/partcpu.py: gateway workers,
    Redis, mock nodes, proxy) plus each load-generator process.  Redis's
    figure per *admitted* (2xx) request comes from its own ``INFO cpu``, the
    number the Redis budget is set on.
    """
    duration = sum(r.duration_s for r in results)
    cpu_s: dict[str, float] = {}
    cpus: dict[str, tuple[int, ...] | None] = {}
    ticks: dict[int, tuple[int, int]] = {}
    redis: list[float | None] = []
    for res in results:
        for part, used in res.parts_cpu_s.items():
            cpu_s[part] = cpu_s.get(part, 0.0) + used
            cpus[part] = res.parts_cpus.get(part)
        for i, used in enumerate(res.cpu_s, 1):
            part = f"load generator {i}"
            cpu_s[part] = cpu_s.get(part, 0.0) + used
            cpus[part] = res.spec.cpus
        for cpu, (busy, total) in res.cpu_ticks.items():
            b0, t0 = ticks.get(cpu, (0, 0))
            ticks[cpu] = (b0 + busy, t0 + total)
        redis.append(res.redis_info_cpu_s)
    rows = v.cpu_rows(cpu_s, duration, answered, cpus)
    machine_busy = v.busy_pct(ticks)
    redis_s = sum(x for x in redis if x is not None) if all(x is not None for x in redis) else None
    return {
        "cpu_by_part": rows,
        "cpu_busy_pct": {str(cpu): round(pct, 1) for cpu, pct in sorted(machine_busy.items())},
        "at_limit": v.at_limit(rows, machine_busy),
        "admitted": admitted,
        "redis_info_cpu_s": redis_s,
        "redis_cpu_us_per_admitted": v.per_request_us(redis_s, admitted),
    }


def _per_req(cpu_s: float | None, answered: int) -> float | None:
    return cpu_s * 1e6 / answered if cpu_s is not None and answered else None


def timeline(res: LoadResult, step_s: float = 0.1) -> dict[str, Any]:
    """Answers per second by kind (re-binned to ``step_s``) and p50/p99 per second."""
    factor = max(1, round(step_s / res.spec.timeline_step_s))
    step = res.spec.timeline_step_s * factor
    buckets = max((b // factor for b, _ in res.timeline), default=-1) + 1
    series: dict[str, list[float]] = {}
    for (bucket, kind), n in res.timeline.items():
        if bucket >= 0:
            series.setdefault(kind, [0.0] * buckets)[bucket // factor] += n / step
    seconds = sorted(s for s in res.second_hists if s >= 0)
    return {
        "step_s": step,
        "rps_by_kind": dict(sorted(series.items())),
        "seconds": seconds,
        "p50_ms": [res.second_hists[s].percentile_ms(50) for s in seconds],
        "p99_ms": [res.second_hists[s].percentile_ms(99) for s in seconds],
    }


def generator_notes(targets: dict[str, dict[str, Any]]) -> list[str]:
    """Warnings when the load generator itself may have limited the result."""
    notes = []
    for name, summary in targets.items():
        gen = summary.get("generator", {})
        busiest = max(gen.get("cpu_pct") or [0.0])
        if busiest > GENERATOR_BUSY_PCT:
            notes.append(
                f"{name}: a load-generator process used {busiest:.0f}% of a CPU; the "
                "generator may be the bottleneck (add --procs or a machine)."
            )
        if gen.get("lag_p99_ms", 0.0) > GENERATOR_LAG_MS:
            notes.append(
                f"{name}: the generator's schedule ran {gen['lag_p99_ms']:.1f} ms late at p99 "
                "(its own CPU starvation, excluded from latency)."
            )
    return notes


def machine_info() -> dict[str, Any]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpus": cpus,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
    }


def new_report(scenario: str, description: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "description": description,
        "command": "python -m bench " + " ".join(redact_argv(sys.argv[1:])),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "params": params,
        "targets": {},
        "ratios": {},
        "figures": {},
        "verdict": {"pass": None, "checks": []},
        "events": [],
        "notes": [],
    }


# ---- Markdown ----------------------------------------------------------------


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def _fmt_figure(value: Any) -> str:
    """Figures keep 4 significant digits (ratios like 0.996 must not round to 1.00)."""
    if isinstance(value, float) and not math.isnan(value) and abs(value) < 10_000:
        return f"{value:.4g}"
    return _fmt(value)


def render_markdown(report: dict[str, Any]) -> str:
    """Human report: results table, ratios, errors, figures, verdict, events."""
    out = [f"# bench {report['scenario']}", "", report.get("description", ""), ""]
    m = report.get("machine", {})
    out.append(f"- command: `{report.get('command', '')}`")
    out.append(f"- machine: {m.get('cpus')} CPUs, {m.get('platform')}, Python {m.get('python')}")
    if report.get("cpu_layout"):
        out.append(f"- pinning: {report['cpu_layout']}")
    if report.get("door"):
        out.append(f"- door: the gateway's server.door = {report['door']!r}")
    out.append(f"- started: {report.get('started_at', '')}")
    out.append("")
    targets: dict[str, dict[str, Any]] = report.get("targets", {})
    if targets:
        out += [
            "## Results",
            "",
            "| target | mode | offered req/s | answered req/s | ok req/s | p50 ms | p90 ms "
            "| p99 ms | p99.9 ms | error rate | server CPU µs/req |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, s in targets.items():
            lat = s["latency_ms"]
            out.append(
                f"| {name} | {s['mode']} | {_fmt(s['offered_rps'], 0)} "
                f"| {_fmt(s['throughput_rps'], 0)} | {_fmt(s['ok_rps'], 0)} "
                f"| {_fmt(lat.get('p50_ms'))} | {_fmt(lat.get('p90_ms'))} "
                f"| {_fmt(lat.get('p99_ms'))} | {_fmt(lat.get('p99.9_ms'))} "
                f"| {s['error_rate'] * 100:.2f}% | {_fmt(s.get('server_cpu_us_per_req'), 0)} |"
            )
        out += [
            "",
            "Latency is of `ok` answers: from the intended send time in open-loop runs "
            "(queueing behind a slow server counts), from the actual send in closed-loop runs.",
            "",
        ]
    out += render_cpu_by_part(targets)
    out += render_scale(report.get("scale"))
    ratios: dict[str, dict[str, float | None]] = report.get("ratios", {})
    if ratios:
        names = list(ratios)
        figures = list(next(iter(ratios.values())))
        out += ["## Ratios", "", "| figure | " + " | ".join(names) + " |"]
        out.append("|---|" + "---:|" * len(names))
        for fig in figures:
            out.append(f"| {fig} | " + " | ".join(_fmt(ratios[n][fig]) for n in names) + " |")
        out.append("")
    errors = [(n, k, c) for n, s in targets.items() for k, c in s["errors"].items()]
    if errors:
        out += ["## Errors by kind", "", "| target | kind | count |", "|---|---|---:|"]
        out += [f"| {n} | {k} | {_fmt(c)} |" for n, k, c in errors]
        out.append("")
    figures_: dict[str, Any] = report.get("figures", {})
    if figures_:
        out += ["## Figures", "", "| figure | value |", "|---|---:|"]
        out += [
            f"| {k} | {_fmt_figure(v)} |"
            for k, v in figures_.items()
            if not isinstance(v, dict | list)
        ]
        out.append("")
    checks = report.get("verdict", {}).get("checks", [])
    if checks:
        passed = report["verdict"]["pass"]
        out += [f"## Verdict: {'PASS' if passed else 'FAIL'}", ""]
        out += [f"- {'PASS' if c['pass'] else 'FAIL'} {c['name']}: {c['detail']}" for c in checks]
        out.append("")
    if report.get("events"):
        out += ["## Events", ""]
        out += [f"- t={e['t_s']:.3f} s: {e['what']}" for e in report["events"]]
        out.append("")
    if report.get("notes"):
        out += ["## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    return "\n".join(out)


def render_cpu_by_part(targets: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown lines: each part's CPU per target, and what was at its limit."""
    if not any(s.get("cpu_by_part") for s in targets.values()):
        return []
    out = [
        "## CPU by part",
        "",
        "| target | part | CPUs | CPU s | % of one core | CPU µs per answer |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name, s in targets.items():
        for row in s.get("cpu_by_part", []):
            pinned = ",".join(map(str, row["cpus"])) if row.get("cpus") else "any"
            out.append(
                f"| {name} | {row['part']} | {pinned} | {row['cpu_s']:.2f} "
                f"| {_fmt(row['core_pct'], 0)} | {_fmt(row['us_per_req'], 1)} |"
            )
    out.append("")
    for name, s in targets.items():
        if "at_limit" not in s:
            continue
        busy = ", ".join(f"CPU {c} {p:.0f}%" for c, p in s.get("cpu_busy_pct", {}).items())
        out.append(
            f"- {name}: at its limit: **{s['at_limit']}**" + (f" (machine: {busy})" if busy else "")
        )
        if s.get("redis_cpu_us_per_admitted") is not None:
            out.append(
                f"- {name}: Redis CPU per admitted request (INFO cpu): "
                f"**{s['redis_cpu_us_per_admitted']:.1f} µs** over {s['admitted']:,} admitted"
            )
    out.append("")
    return out


def render_scale(scale: dict[str, Any] | None) -> list[str]:
    """Markdown lines for ``bench scale``: throughput against the ideal line."""
    if not scale:
        return []
    out = [
        "## Scaling",
        "",
        "| workers | req/s | ideal req/s | efficiency | speed-up | gateway CPU µs/req "
        "| Redis CPU µs/admitted | at its limit |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in scale["rows"]:
        out.append(
            f"| {r['workers']} | {_fmt(r['throughput_rps'], 0)} | {_fmt(r['ideal_rps'], 0)} "
            f"| {r['efficiency']:.2f} | {r['speedup']:.2f}x "
            f"| {_fmt(r.get('gateway_cpu_us_per_req'), 0)} "
            f"| {_fmt(r.get('redis_cpu_us_per_admitted'), 1)} | {r.get('at_limit', '')} |"
        )
    out.append("")
    return out


def write_outputs(
    report: dict[str, Any],
    *,
    out_dir: str | None,
    out_json: str | None = None,
    out_md: str | None = None,
    plot_path: str | None = None,
    make_plot: bool = True,
) -> dict[str, str]:
    """Write JSON / Markdown / PNG where asked; return what went where."""
    stem = f"{report['scenario']}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    paths: dict[str, str] = {}
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        out_json = out_json or os.path.join(out_dir, stem + ".json")
        out_md = out_md or os.path.join(out_dir, stem + ".md")
        plot_path = plot_path or os.path.join(out_dir, stem + ".png")
    if out_json:
        Path(out_json).write_text(json.dumps(report, indent=2, default=str) + "\n")
        paths["json"] = out_json
    if out_md:
        Path(out_md).write_text(render_markdown(report) + "\n")
        paths["markdown"] = out_md
    if plot_path and make_plot:
        plot(report, plot_path)
        paths["plot"] = plot_path
    return paths
