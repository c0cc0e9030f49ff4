"""``python -m bench.micro.metrics``: CPU of counting one answered request in the metrics.

Every request ends with ``NetworkMetrics.answered``: one ``gateway_requests``
count and one ``gateway_request_duration_seconds`` observation. Two
candidates, each on its own fresh registry with the same latencies:

- ``public calls``: the cached label children's ``Counter.inc()`` and
  ``Histogram.observe()`` (what ``answered`` did before);
- ``NetworkMetrics.answered``: the children's value objects bumped directly,
  the bucket found by bisection (what it does now).

Both registries' ``/metrics`` text is compared at the end (the run fails if
it differs), so the figure is for the same values served. In-process,
pinned to one CPU, best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from bench.micro.common import Row, add_common, emit, pin_self, where
from gateway.telemetry.metrics import Metrics

METHODS = ("eth_getBlockByNumber", "eth_getBalance", "eth_call", "eth_chainId")


def _latencies(n: int) -> list[float]:
    """Seconds spread over the latency buckets, as a cache-hit heavy mix sees them."""
    rnd = random.Random(7)
    return [rnd.lognormvariate(-7.5, 1.5) for _ in range(n)]


def _public(metrics: Metrics) -> Callable[[str, int, float], None]:
    metrics.network("bsc")  # its other children exist in the app too
    requests, latency = metrics.requests, metrics.latency.labels("bsc")
    children = {(m, 200): requests.labels("bsc", m, "200") for m in METHODS}

    def answered(method: str, status: int, seconds: float) -> None:
        children[(method, status)].inc()
        latency.observe(seconds)

    return answered


def _run(answered: Callable[[str, int, float], None], seconds: float, lat: list[float]) -> Row:
    calls, n = 0, len(lat)
    cpu0, t0 = time.process_time(), time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for i in range(1000):
            answered(METHODS[i & 3], 200, lat[(calls + i) % n])
        calls += 1000
    return Row("", calls, time.monotonic() - t0, time.process_time() - cpu0, {})


def measure(args: argparse.Namespace) -> list[Row]:
    lat = _latencies(4096)
    rows = []
    texts = []
    for name in ("public calls", "NetworkMetrics.answered"):
        best: Row | None = None
        metrics = Metrics()
        for _ in range(args.repeats):
            metrics = Metrics()
            fn = _public(metrics) if name == "public calls" else metrics.network("bsc").answered
            row = _run(fn, args.seconds, lat)
            if best is None or (row.cpu_us_per_call or 0) < (best.cpu_us_per_call or 0):
                best = row
        assert best is not None
        rows.append(Row(name, best.calls, best.seconds, best.cpu_s, {}))
        # the same calls on a fresh registry each, so the two texts must match
        fresh = Metrics()
        fn = _public(fresh) if name == "public calls" else fresh.network("bsc").answered
        for i, s in enumerate(lat):
            fn(METHODS[i & 3], 200, s)
        texts.append(_without_created(fresh.exposition()))
    if texts[0] != texts[1]:
        raise SystemExit("the two candidates' /metrics text differs")
    return rows


def _without_created(text: bytes) -> bytes:
    """The text less its ``_created`` lines (the time each child was made)."""
    return b"\n".join(x for x in text.split(b"\n") if b"_created" not in x)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.micro.metrics",
        description="CPU per answered request in the metrics: prometheus-client's public "
        "calls vs NetworkMetrics.answered (the same /metrics text, checked).",
    )
    add_common(p)
    p.add_argument("--repeats", type=int, default=3, help="runs per candidate; best is kept")
    args = p.parse_args(argv)
    plan, machine = pin_self()
    rows = measure(args)
    emit(
        "metrics CPU per answered request",
        f"one request count and one latency observation, best of {args.repeats}; "
        f"{where(plan, 'nothing else', 'benchmark')}",
        rows,
        as_json=args.json,
        params={"seconds": args.seconds, "repeats": args.repeats},
        machine=machine,
        cpu_label="CPU µs/call",
    )


if __name__ == "__main__":
    main()
