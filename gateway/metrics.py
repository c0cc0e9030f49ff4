"""Prometheus collectors, one registry per app (no module-level state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)


class Metrics:
    """The gateway's collectors; the handler and pools call these, nothing else."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("gateway_requests", "RPC requests answered",
                                ["network", "method", "status"], registry=r)
        self.latency = Histogram("gateway_request_duration_seconds",
                                 "Time from request read to answer written",
                                 ["network"], buckets=LATENCY_BUCKETS, registry=r)
        self.rate_limited = Counter("gateway_rate_limited", "Requests refused by a plan limit",
                                    ["network"], registry=r)
        self.upstream_results = Counter("gateway_upstream_results",
                                        "Upstream call outcomes by node",
                                        ["network", "node", "result"], registry=r)
        self.redis_errors = Counter("gateway_redis_errors",
                                    "Admission checks that Redis could not answer",
                                    ["policy"], registry=r)
        self.upstream_healthy = Gauge("gateway_upstream_healthy", "1 if the node is in rotation",
                                      ["network", "node"], registry=r)
