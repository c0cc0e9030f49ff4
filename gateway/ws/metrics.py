"""WebSocket collectors, registered on the app's one registry (``Metrics.registry``).

Per-notification counts are plain ints on the fan-out path (see
``fanout.Counters``) and added to these counters once per charge interval,
so a fan-out to 10,000 sockets does no Prometheus work per socket.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from gateway.telemetry.metrics import Metrics

DISCONNECT_REASONS = (
    "client",
    "revoked",
    "expired",
    "slow",
    "too_big",
    "heartbeat",
    "shutdown",
    "error",
)


class WsMetrics:
    """Open sockets, subscriptions, notifications and disconnect reasons."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.sockets = Gauge(
            "gateway_ws_sockets",
            "Open client WebSockets",
            ["network"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.subscriptions = Gauge(
            "gateway_ws_subscriptions",
            "Client subscriptions open, by kind",
            ["kind"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.upstream_subscriptions = Gauge(
            "gateway_ws_upstream_subscriptions",
            "Subscriptions held at nodes (shared by every client of one kind and filter)",
            ["network"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.notifications = Counter(
            "gateway_ws_notifications",
            "Notifications delivered to client sockets",
            ["network"],
            registry=r,
        )
        self.dropped = Counter(
            "gateway_ws_notifications_dropped",
            "Notifications not delivered (budget: key over its plan; slow: client not reading)",
            ["reason"],
            registry=r,
        )
        self.disconnects = Counter(
            "gateway_ws_disconnects",
            "Client sockets closed, by reason",
            ["reason"],
            registry=r,
        )
        for reason in DISCONNECT_REASONS:  # each shows at 0 before its first close (rate() works)
            self.disconnects.labels(reason)
        self.failovers = Counter(
            "gateway_ws_upstream_failovers",
            "Times a network's node socket was lost and subscriptions moved",
            ["network"],
            registry=r,
        )
        self.gap_filled = Counter(
            "gateway_ws_gap_filled",
            "Notifications the gateway fetched itself after a gap or failover",
            ["network"],
            registry=r,
        )
