"""Prometheus collectors, one registry per app (no module-level state).

Several worker processes on one port (``gateway serve --workers N``,
gunicorn) use prometheus-client's multiprocess mode: the supervisor points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the workers start,
every worker writes its samples there, and whichever worker answers
``/metrics`` merges all of them (counters and histograms summed over
workers; gauges by the mode given below). Without that variable each app
keeps its values in its own registry, which is what tests and a single
process use. The text is served on its own listener (``gateway.ops.metricsport``).

The handler and the pools call the label children cached here (one dict
lookup per request), never ``.labels()`` on the hot path.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as _mp

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Outcomes of one upstream attempt, the ``result`` label of gateway_upstream_results.
UPSTREAM_RESULTS = ("ok", "error", "timeout", "retry")


def multiprocess_dir() -> str | None:
    """The multiprocess directory when one is configured, else None."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


class Metrics:
    """The gateway's collectors; the handler, pools and server call these, nothing else."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests", "RPC requests answered", ["network", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "gateway_request_duration_seconds",
            "Time from request read to answer written",
            ["network"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rate_limited = Counter(
            "gateway_rate_limited", "Requests refused by a plan limit", ["network"], registry=r
        )
        self.upstream_results = Counter(
            "gateway_upstream_results",
            "Upstream attempts by node and outcome (ok, error, timeout, retry)",
            ["network", "node", "result"],
            registry=r,
        )
        self.redis_errors = Counter(
            "gateway_redis_errors",
            "Admission checks that Redis could not answer, by the "
            "policy applied (closed: 503, open: let through)",
            ["policy"],
            registry=r,
        )
        self.upstream_healthy = Gauge(
            "gateway_upstream_healthy",
            "1 if the node is in rotation (every worker agrees)",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.upstream_head = Gauge(
            "gateway_upstream_head_block",
            "Latest block the node reported to the health probe",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.connections = Gauge(
            "gateway_open_connections",
            "Client connections open",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.connections_rejected = Counter(
            "gateway_connections_rejected",
            "Connections refused at server.max_connections",
            registry=r,
        )
        self.client_timeouts = Counter(
            "gateway_client_timeouts",
            "Connections closed because the client was too slow to send its "
            "request (phase: header, body) or did not read its answer (write)",
            ["phase"],
            registry=r,
        )
        self._networks: dict[str, NetworkMetrics] = {}

    def network(self, name: str) -> NetworkMetrics:
        """The cached per-network children (one object per network name)."""
        net = self._networks.get(name)
        if net is None:
            net = self._networks[name] = NetworkMetrics(self, name)
        return net

    def node(self, network: str, node: str) -> NodeMetrics:
        return NodeMetrics(self, network, node)

    def exposition(self) -> bytes:
        """The Prometheus text for ``/metrics``: every worker's values in multiprocess mode."""
        if multiprocess_dir() is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        _mp.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


class NetworkMetrics:
    """One network's request counters with their label children cached."""

    __slots__ = ("_children", "_latency", "_limited", "_name", "_requests")

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._name = name
        self._requests = metrics.requests
        self._latency = metrics.latency.labels(name)
        self._limited = metrics.rate_limited.labels(name)
        self._children: dict[tuple[str, int], Any] = {}

    def answered(self, method: str, status: int, seconds: float) -> None:
        """Count one answered request and observe its latency."""
        child = self._children.get((method, status))
        if child is None:
            child = self._children[(method, status)] = self._requests.labels(
                self._name, method, str(status)
            )
        child.inc()
        self._latency.observe(seconds)

    def rate_limited(self) -> None:
        self._limited.inc()


class NodeMetrics:
    """One upstream node's children: attempt outcomes, health and head."""

    __slots__ = ("error", "head", "healthy", "ok", "retry", "timeout")

    def __init__(self, metrics: Metrics, network: str, node: str) -> None:
        results = metrics.upstream_results
        self.ok = results.labels(network, node, "ok")
        self.error = results.labels(network, node, "error")
        self.timeout = results.labels(network, node, "timeout")
        self.retry = results.labels(network, node, "retry")
        self.healthy = metrics.upstream_healthy.labels(network, node)
        self.head = metrics.upstream_head.labels(network, node)


def mark_process_dead(pid: int | None = None) -> None:
    """Drop a finished worker's live gauges (multiprocess mode only; no-op otherwise)."""
    if multiprocess_dir() is not None:
        _mp.mark_process_dead(os.getpid() if pid is None else pid)  # type: ignore[no-untyped-call]
