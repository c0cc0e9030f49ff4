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

It stays whole because every collector must be registered on the one per-app
registry with the multiprocess mode chosen above; the classes are the metric
names, one group per concept (app, network, node, intel).
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as _mp

if TYPE_CHECKING:
    from gateway.intel.network import NetworkIntel

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
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


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
        self.admission_wait = Histogram(
            "gateway_admission_wait_seconds",
            "How long calls over their plan's rate waited for room in the bucket "
            "(admitted after the wait, or refused once limits.max_wait_s ran out)",
            ["network"],
            buckets=WAIT_BUCKETS,
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
        self.cache_results = Counter(
            "gateway_cache_lookups",
            "Answer cache lookups by method and result (hit, miss)",
            ["network", "method", "result"],
            registry=r,
        )
        self.cache_bytes = Gauge(
            "gateway_cache_bytes",
            "Bytes the answer cache holds (keys, answers, per-entry overhead)",
            ["network"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.cache_entries = Gauge(
            "gateway_cache_entries",
            "Entries in the answer cache",
            ["network"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.cache_dropped = Counter(
            "gateway_cache_dropped",
            "Cache entries dropped (reason: evicted to stay under max_bytes, "
            "expired because the head moved)",
            ["network", "reason"],
            registry=r,
        )
        self.coalesced = Counter(
            "gateway_coalesced_calls",
            "Calls that joined an identical call already in flight (no node call of their own)",
            ["network"],
            registry=r,
        )
        self.hedges = Counter(
            "gateway_hedges",
            "Hedged reads (result: sent, won = the hedge answered first, "
            "denied = the shared retry/hedge budget refused)",
            ["network", "result"],
            registry=r,
        )
        self.head_lag = Gauge(
            "gateway_upstream_head_lag_blocks",
            "Blocks the node's last reported head is behind the network head",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.network_head = Gauge(
            "gateway_network_head_block",
            "The network head (mark: latest, safe, finalized); never goes back",
            ["network", "mark"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.network_split = Gauge(
            "gateway_network_split",
            "1 while the network's current nodes confirmed different blocks above the "
            "agreed head (the head stays at the last block they agree on)",
            ["network"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.upstream_latency = Histogram(
            "gateway_upstream_latency_seconds",
            "One attempt on one node, from send to its whole answer (or failure)",
            ["network", "node"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_chain_mismatch = Gauge(
            "gateway_upstream_chain_mismatch",
            "1 if the node's eth_chainId differs from the network's chain_id "
            "(out of rotation until it matches)",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.upstream_cordoned = Gauge(
            "gateway_upstream_cordoned",
            "1 while an operator's cordon keeps client calls off the node (admin API)",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.upstream_inconsistent = Gauge(
            "gateway_upstream_inconsistent",
            "1 while the node is out of rotation for a lie proven (headers its own "
            "answers contradict, a block stamped in the future)",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.upstream_ws_heads = Gauge(
            "gateway_upstream_ws_heads",
            "1 while the node's newHeads subscription feeds the network head",
            ["network", "node"],
            registry=r,
            multiprocess_mode="livemax",
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

    def intel(self, network: str) -> NetworkIntelMetrics:
        return NetworkIntelMetrics(self, network)

    def exposition(self) -> bytes:
        """The Prometheus text for ``/metrics``: every worker's values in multiprocess mode."""
        if multiprocess_dir() is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        _mp.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


# The app's one Metrics, defined beside its type (as ``rpc.clientip.CLIENT_IP`` is):
# typedefs importing ops would make ops <-> typedefs, since ops.routes reads app keys.
METRICS = web.AppKey("metrics", Metrics)


class NetworkMetrics:
    """One network's request counters with their label children cached.

    ``answered`` runs once per request, so it bumps the children's value
    objects directly (one locked add each, the bucket found by bisection)
    rather than through ``Counter.inc`` / ``Histogram.observe``, whose
    checks and bucket loop cost about three times as much; the values and
    the text served are the same (``python -m bench.micro.metrics``). Should
    a prometheus-client release lay its children out otherwise, the public
    calls are used.
    """

    __slots__ = (
        "_bounds",
        "_buckets",
        "_children",
        "_latency",
        "_limited",
        "_name",
        "_requests",
        "_sum",
    )

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._name = name
        self._requests = metrics.requests
        self._latency = latency = metrics.latency.labels(name)
        self._limited = metrics.rate_limited.labels(name)
        self._children: dict[tuple[str, int], Any] = {}
        bounds: Any = getattr(latency, "_upper_bounds", None)
        buckets: Any = getattr(latency, "_buckets", None)
        total: Any = getattr(latency, "_sum", None)
        fast = (
            _value_of(self._limited) is not None
            and isinstance(bounds, list)
            and isinstance(buckets, list)
            and len(bounds) == len(buckets) > 0
            and bounds[-1] == math.inf
            and all(hasattr(b, "inc") for b in buckets)
            and hasattr(total, "inc")
        )
        self._bounds: list[float] | None = bounds if fast else None
        self._buckets: list[Any] = buckets if fast else []
        self._sum: Any = total

    def answered(self, method: str, status: int, seconds: float) -> None:
        """Count one answered request and observe its latency."""
        child = self._children.get((method, status))
        if child is None:
            labelled = self._requests.labels(self._name, method, str(status))
            value = _value_of(labelled) if self._bounds is not None else None
            child = self._children[(method, status)] = labelled if value is None else value
        bounds = self._bounds
        if bounds is None:  # the public calls: a layout this code does not know
            child.inc()
            self._latency.observe(seconds)
            return
        child.inc(1)
        self._sum.inc(seconds)
        if seconds != seconds:  # NaN: Histogram.observe counts it in no bucket
            return
        self._buckets[bisect_left(bounds, seconds)].inc(1)

    def rate_limited(self) -> None:
        self._limited.inc()


def _value_of(child: Any) -> Any:
    """A counter child's value object (one locked float), or None if it has none."""
    value = getattr(child, "_value", None)
    return value if value is not None and hasattr(value, "inc") else None


class NodeMetrics:
    """One upstream node's children: attempt outcomes, latency, health and head."""

    __slots__ = (
        "chain_mismatch",
        "cordoned",
        "error",
        "head",
        "healthy",
        "inconsistent",
        "latency",
        "ok",
        "retry",
        "timeout",
        "ws_heads",
    )

    def __init__(self, metrics: Metrics, network: str, node: str) -> None:
        results = metrics.upstream_results
        self.ok = results.labels(network, node, "ok")
        self.error = results.labels(network, node, "error")
        self.timeout = results.labels(network, node, "timeout")
        self.retry = results.labels(network, node, "retry")
        self.healthy = metrics.upstream_healthy.labels(network, node)
        self.head = metrics.upstream_head.labels(network, node)
        self.latency = metrics.upstream_latency.labels(network, node)
        self.chain_mismatch = metrics.upstream_chain_mismatch.labels(network, node)
        self.inconsistent = metrics.upstream_inconsistent.labels(network, node)
        self.cordoned = metrics.upstream_cordoned.labels(network, node)
        self.ws_heads = metrics.upstream_ws_heads.labels(network, node)


class NetworkIntelMetrics:
    """One network's cache, coalescing, hedging and head metrics.

    The hot path only bumps plain integers in the intel objects; ``sync``
    (once per probe) turns their growth into counter increments, so no
    Prometheus work is done per request.
    """

    __slots__ = ("_last", "_metrics", "_name")

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._metrics = metrics
        self._name = name
        self._last: dict[tuple[str, ...], int] = {}

    def _inc(self, counter: Any, labels: tuple[str, ...], total: int) -> None:
        before = self._last.get(labels, 0)
        if total > before:
            counter.labels(*labels).inc(total - before)
        self._last[labels] = total

    def sync(self, intel: NetworkIntel) -> None:
        m, name = self._metrics, self._name
        cache = intel.cache
        if cache is not None:
            stats = cache.stats
            for method, n in list(stats.hits_by_method.items()):
                self._inc(m.cache_results, (name, method, "hit"), n)
            for method, n in list(stats.misses_by_method.items()):
                self._inc(m.cache_results, (name, method, "miss"), n)
            self._inc(m.cache_dropped, (name, "evicted"), stats.evictions)
            self._inc(m.cache_dropped, (name, "expired"), stats.expired)
            m.cache_bytes.labels(name).set(cache.bytes)
            m.cache_entries.labels(name).set(len(cache))
        if intel.coalescer is not None:
            self._inc(m.coalesced, (name,), intel.coalescer.coalesced)
        hs = intel.hedge_stats
        self._inc(m.hedges, (name, "sent"), hs.hedges)
        self._inc(m.hedges, (name, "won"), hs.hedges_won)
        self._inc(m.hedges, (name, "denied"), hs.denied)
        for node, lag in intel.heads.lags().items():
            if lag is not None:
                m.head_lag.labels(name, node).set(lag)
        head = intel.heads.head
        for mark, value in (
            ("latest", head.number),
            ("safe", head.safe),
            ("finalized", head.finalized),
        ):
            if value >= 0:
                m.network_head.labels(name, mark).set(value)
        m.network_split.labels(name).set(1 if intel.heads.split else 0)


def mark_process_dead(pid: int | None = None) -> None:
    """Drop a finished worker's live gauges (multiprocess mode only; no-op otherwise)."""
    if multiprocess_dir() is not None:
        _mp.mark_process_dead(os.getpid() if pid is None else pid)  # type: ignore[no-untyped-call]
