"""The arithmetic behind each scenario's verdict, kept free of I/O so it is tested.

A benchmark is only useful if its pass/fail lines can be trusted; every
figure a scenario prints is computed here from plain numbers.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
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
