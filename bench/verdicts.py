"""The arithmetic behind each scenario's verdict, kept free of I/O so it is tested.

A benchmark is only useful if its pass/fail lines can be trusted; every
figure a scenario prints is computed here from plain numbers.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ADMITTED_KINDS = ("ok", "rpc_error")  # HTTP 2xx: the gateway let the request through
OVERLOAD_KINDS = ("not_sent", "unfinished")  # the target (or generator) did not keep up


def answered(kind: str) -> bool:
    """An HTTP answer came back (as opposed to a timeout, refusal or no send)."""
    return kind in ADMITTED_KINDS or kind.startswith("http_")


def send_window(first_sent: Mapping[str, float], last_sent: Mapping[str, float]) -> float:
    """Seconds from the first to the last send among answered requests."""
    firsts = [t for k, t in first_sent.items() if answered(k)]
    lasts = [t for k, t in last_sent.items() if answered(k)]
    return max(lasts) - min(firsts) if firsts and lasts else 0.0


def kept_up(kinds: Mapping[str, int]) -> dict[str, Any]:
    """Check that every offered request was sent and answered in time."""
    lost = {k: kinds[k] for k in OVERLOAD_KINDS if kinds.get(k)}
    return check(
        "the target kept up with the offered load",
        not lost,
        "all offered requests sent and answered"
        if not lost
        else f"{lost}: lower --rate, or the figures above are not about the limiter",
    )


def theoretical_admitted(rate: float, burst: float, window_s: float) -> float:
    """Requests a full token bucket admits over ``window_s`` of over-limit traffic.

    The bucket starts full (``burst`` tokens) and refills at ``rate`` per
    second, so traffic above the rate gets ``burst + rate * t`` through.
    """
    if rate < 0 or burst < 0 or window_s < 0:
        raise ValueError("rate, burst and window must be >= 0")
    return burst + rate * window_s


def expected_admitted(
    offered: int, rate: float, burst: float, window_s: float, cost: int = 1
) -> float:
    """What a correct limiter admits: all offered, or the bucket's share if less.

    ``cost`` is the compute units of one request (a batch costs its calls).
    """
    return min(float(offered), theoretical_admitted(rate, burst, window_s) / max(cost, 1))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when it means nothing (zero or missing)."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def within(value: float | None, target: float, tolerance: float) -> bool:
    """``value / target`` is within ``1 ± tolerance`` (an absolute slack of 1 is allowed)."""
    if value is None:
        return False
    return abs(value - target) <= max(tolerance * target, 1.0)


def check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "pass": bool(passed), "detail": detail}


def verdict(checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"pass": all(c["pass"] for c in checks) if checks else None, "checks": checks}


def window_counts(
    timeline: Mapping[tuple[int, str], int], step_s: float, t0: float, t1: float
) -> collections.Counter[str]:
    """Outcome counts of answers completed in [t0, t1) (seconds from load start)."""
    out: collections.Counter[str] = collections.Counter()
    for (bucket, kind), n in timeline.items():
        t = bucket * step_s
        if t0 <= t < t1:
            out[kind] += n
    return out


def error_fraction(counts: Mapping[str, int]) -> float:
    total = sum(counts.values())
    bad = sum(n for k, n in counts.items() if k not in ADMITTED_KINDS)
    return bad / total if total else 0.0


def last_time(
    timeline: Mapping[tuple[int, str], int], step_s: float, kinds: Iterable[str], after: float = 0.0
) -> float | None:
    """End of the last timeline bucket (s) at/after ``after`` holding one of ``kinds``."""
    wanted = set(kinds)
    times = [
        (b + 1) * step_s
        for (b, k), n in timeline.items()
        if k in wanted and n and (b + 1) * step_s > after
    ]
    return max(times) if times else None


def first_time(
    timeline: Mapping[tuple[int, str], int], step_s: float, kinds: Iterable[str], after: float = 0.0
) -> float | None:
    """Start of the first timeline bucket (s) at/after ``after`` holding one of ``kinds``."""
    wanted = set(kinds)
    times = [
        b * step_s for (b, k), n in timeline.items() if k in wanted and n and b * step_s >= after
    ]
    return min(times) if times else None


def side_by_side_ratios(
    subject: Mapping[str, Any], baseline: Mapping[str, Any]
) -> dict[str, float | None]:
    """subject/baseline for each headline figure of two target summaries."""
    out: dict[str, float | None] = {
        "throughput_rps": ratio(subject.get("throughput_rps"), baseline.get("throughput_rps")),
        "ok_rps": ratio(subject.get("ok_rps"), baseline.get("ok_rps")),
    }
    lat_s, lat_b = subject.get("latency_ms", {}), baseline.get("latency_ms", {})
    for key in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "p99.9_ms"):
        out[key] = ratio(lat_s.get(key), lat_b.get(key))
    out["server_cpu_us_per_req"] = ratio(
        subject.get("server_cpu_us_per_req"), baseline.get("server_cpu_us_per_req")
    )
    return out


# ---- CPU of each part: which one is at its limit ---------------------------------

CPU_LIMIT_PCT = 90.0  # a part (or a CPU) this busy is taken to be the bottleneck


def parse_info_cpu(text: str) -> float | None:
    """used_cpu_sys + used_cpu_user (s) from Redis ``INFO cpu`` (children excluded)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep and name in ("used_cpu_sys", "used_cpu_user"):
            try:
                values[name] = float(value)
            except ValueError:
                return None
    return values["used_cpu_sys"] + values["used_cpu_user"] if len(values) == 2 else None


def parse_commandstats(text: str) -> dict[str, tuple[int, int]]:
    """Per command: (calls, usec) from Redis ``INFO commandstats``.

    A command a script runs is counted both under its own name and inside the
    script's ``evalsha`` time, so the rows overlap; they are a split, not a sum.
    """
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().partition(":")
        if not sep or not name.startswith("cmdstat_"):
            continue
        fields = dict(f.split("=", 1) for f in rest.split(",") if "=" in f)
        with contextlib.suppress(KeyError, ValueError):
            out[name.removeprefix("cmdstat_")] = (int(fields["calls"]), int(fields["usec"]))
    return out


def commands_delta(
    before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """(calls, usec) of each command run between two ``parse_commandstats`` readings."""
    out: dict[str, tuple[int, int]] = {}
    for cmd, (calls, usec) in after.items():
        calls0, usec0 = before.get(cmd, (0, 0))
        if calls > calls0:
            out[cmd] = (calls - calls0, usec - usec0)
    return out


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before for every part seen both times (a restarted part counts from 0)."""
    return {k: a - before[k] if a >= before[k] else a for k, a in after.items() if k in before}


def ticks_delta(
    before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """(busy, total) /proc/stat ticks per CPU between two snapshots."""
    return {
        cpu: (a[0] - before[cpu][0], a[1] - before[cpu][1])
        for cpu, a in after.items()
        if cpu in before
    }


def busy_pct(ticks: Mapping[int, tuple[int, int]]) -> dict[int, float]:
    """Machine-wide busy % of each CPU (every process on it, not just ours)."""
    return {cpu: 100.0 * busy / total for cpu, (busy, total) in ticks.items() if total > 0}


def per_request_us(cpu_s: float | None, requests: int) -> float | None:
    """CPU microseconds per request, or None when either side is unknown or zero."""
    return cpu_s * 1e6 / requests if cpu_s is not None and requests > 0 else None


def cpu_rows(
    cpu_s: Mapping[str, float],
    duration_s: float,
    answered: int,
    cpus: Mapping[str, Sequence[int] | None] | None = None,
) -> list[dict[str, Any]]:
    """One row per part: CPU seconds, % of one core over the run, µs per answer."""
    rows = []
    for part, seconds in cpu_s.items():
        pinned = (cpus or {}).get(part)
        rows.append(
            {
                "part": part,
                "cpu_s": seconds,
                "core_pct": 100.0 * seconds / duration_s if duration_s > 0 else None,
                "us_per_req": per_request_us(seconds, answered),
                "cpus": list(pinned) if pinned is not None else None,
            }
        )
    return rows


def at_limit(
    rows: Sequence[Mapping[str, Any]],
    cpu_busy_pct: Mapping[int, float] | None = None,
    limit_pct: float = CPU_LIMIT_PCT,
) -> str:
    """Name what limited the run, in words.

    In order: a single part using ``limit_pct`` % of one core (one process
    is one event loop: it cannot use more); else a CPU set whose pinned parts
    together use ``limit_pct`` % of its CPUs; else a CPU set busy ``limit_pct``
    % machine-wide although our parts on it are not (other processes took
    it); else "none saturated", with the busiest part for orientation.
    """
    known = [r for r in rows if r.get("core_pct") is not None]
    if not known:
        return "unknown (no CPU figures: remote target)"
    busiest = max(known, key=lambda r: r["core_pct"])
    if busiest["core_pct"] >= limit_pct:
        return f"{busiest['part']} at {busiest['core_pct']:.0f}% of a core"
    groups: dict[tuple[int, ...], list[Mapping[str, Any]]] = {}
    for r in known:
        if r.get("cpus"):
            groups.setdefault(tuple(r["cpus"]), []).append(r)
    found = []
    for cpuset, members in sorted(groups.items()):
        ours = sum(r["core_pct"] for r in members)
        capacity = 100.0 * len(cpuset)
        top = max(members, key=lambda r: r["core_pct"])
        label = "CPU " + ",".join(map(str, cpuset))
        machine = [cpu_busy_pct[c] for c in cpuset if cpu_busy_pct and c in cpu_busy_pct]
        if ours >= limit_pct / 100.0 * capacity:
            found.append(
                f"{label} saturated by its {len(members)} pinned parts "
                f"({ours:.0f}% of {capacity:.0f}%; busiest {top['part']} {top['core_pct']:.0f}%)"
            )
        elif machine and sum(machine) >= limit_pct / 100.0 * capacity:
            found.append(
                f"{label} saturated by other processes: {sum(machine):.0f}% busy, "
                f"ours {ours:.0f}% of it"
            )
    if found:
        return "; ".join(found)
    if cpu_busy_pct and not groups:
        total = sum(cpu_busy_pct.values())
        capacity = 100.0 * len(cpu_busy_pct)
        if total >= limit_pct / 100.0 * capacity:
            return f"the machine: all CPUs {total / len(cpu_busy_pct):.0f}% busy"
    return f"none saturated (busiest: {busiest['part']} at {busiest['core_pct']:.0f}% of a core)"


def scale_rows(throughput: Mapping[int, float]) -> list[dict[str, Any]]:
    """Per worker count: throughput, the ideal (1-worker x N), efficiency, speed-up.

    The ideal line is anchored at the smallest count measured, scaled
    linearly (``base / base_count * n``), so a run that starts at 2 still
    has a line.
    """
    if not throughput:
        return []
    base_n = min(throughput)
    per_worker = throughput[base_n] / base_n
    rows = []
    for n in sorted(throughput):
        ideal = per_worker * n
        rows.append(
            {
                "workers": n,
                "throughput_rps": throughput[n],
                "ideal_rps": ideal,
                "efficiency": throughput[n] / ideal if ideal > 0 else 0.0,
                "speedup": throughput[n] / throughput[base_n] if throughput[base_n] > 0 else 0.0,
            }
        )
    return rows


def cpu_growth(rows: list[dict[str, Any]]) -> dict[int, float] | None:
    """Gateway CPU per request at each worker count over the 1-worker figure, minus 1.

    Workers add up when this stays near 0: a request costs the same CPU
    whether one process serves it or several share the load (the goal is
    within 10 %). None when the 1-worker figure is unknown.
    """
    base = rows[0].get("gateway_cpu_us_per_req") if rows else None
    if not base:
        return None
    return {
        int(r["workers"]): r["gateway_cpu_us_per_req"] / base - 1.0
        for r in rows[1:]
        if r.get("gateway_cpu_us_per_req")
    }
