"""``NetworkMetrics.answered`` serves what prometheus-client's own calls would."""

from __future__ import annotations

import math

from gateway.telemetry.metrics import LATENCY_BUCKETS, Metrics


def _text(metrics: Metrics) -> list[bytes]:
    """The /metrics text less the ``_created`` lines (when each child was made)."""
    return [x for x in metrics.exposition().split(b"\n") if b"_created" not in x]


def _public(metrics: Metrics, method: str, status: int, seconds: float) -> None:
    metrics.requests.labels("bsc", method, str(status)).inc()
    metrics.latency.labels("bsc").observe(seconds)


def test_answered_matches_the_public_calls_at_every_bucket_edge() -> None:
    edges = [b for bound in LATENCY_BUCKETS for b in (bound, math.nextafter(bound, 1.0))]
    latencies = [-0.001, 0.0, *edges, 1e6, math.inf]
    calls = [
        (method, status, s)
        for i, s in enumerate(latencies)
        for method, status in (("eth_getBlockByNumber", 200), ("-" if i % 2 else "batch", 429))
    ]
    fast, public = Metrics(), Metrics()
    public.network("bsc")  # the app makes its children before any request
    answered = fast.network("bsc").answered
    for method, status, seconds in calls:
        answered(method, status, seconds)
        _public(public, method, status, seconds)
    assert _text(fast) == _text(public)
    sample = fast.registry.get_sample_value
    top = {"network": "bsc", "le": "+Inf"}
    assert sample("gateway_request_duration_seconds_bucket", top) == len(calls)
    labels = {"network": "bsc", "method": "eth_getBlockByNumber", "status": "200"}
    assert sample("gateway_requests_total", labels) == len(latencies)
    # each bound holds what is at most it: the exact bound in, the next float out
    first = {"network": "bsc", "le": str(LATENCY_BUCKETS[0])}
    assert sample("gateway_request_duration_seconds_bucket", first) == 3 * 2


def test_a_nan_latency_counts_the_request_in_no_bucket_as_observe_does() -> None:
    fast, public = Metrics(), Metrics()
    public.network("bsc")
    fast.network("bsc").answered("eth_call", 200, math.nan)
    _public(public, "eth_call", 200, math.nan)
    assert _text(fast) == _text(public)
