"""One upstream node and what the pool knows about it.

A node gets client calls only while it is *in service*: its last probe
answered (``healthy``), its ``eth_chainId`` matched the network's
(``verified``) and what it said of the chain was consistent (not
``inconsistent``). Both start False, so a node that has not answered its first
check gets nothing. ``down_until`` takes it out for a cooldown
after repeated failures, an operator's cordon for as long as it lasts
(``usable``). Logs, metrics and ``repr`` name a node
by its configured ``name`` (``<network>-<index>`` unless the node table gives
one) or by ``display``, its URL with secrets masked (``config.redact``),
never by its URL.

What the node table says of it (``config.NodeConfig``) rides along: how much
state it keeps (``archive``, ``state_blocks``), the ``eth_getLogs`` range it
takes (``max_logs_range``, lowered by ``logs_limit`` when it refuses a
range in its own words: ``gateway.rpc.logsplit``) and its method ``groups``.
"""

from __future__ import annotations

from gateway.config import NodeConfig
from gateway.config.redact import redact_url
from gateway.telemetry.metrics import NodeMetrics
from gateway.upstream.transport import Transport


class Node:
    """One upstream node: where it is, how to reach it, what its probes said."""

    __slots__ = (
        "archive",
        "calls_failed",
        "calls_ok",
        "chain_id",
        "consecutive_failures",
        "cordon",
        "display",
        "down_until",
        "groups",
        "head",
        "healthy",
        "in_flight",
        "inconsistent",
        "inconsistent_until",
        "lagging",
        "last_error",
        "logs_limit",
        "metrics",
        "name",
        "newheads",
        "state_blocks",
        "transport",
        "url",
        "verified",
        "ws_url",
    )

    def __init__(
        self,
        url: str,
        name: str,
        metrics: NodeMetrics | None = None,
        ws_url: str = "",
        spec: NodeConfig | None = None,
    ) -> None:
        spec = spec if spec is not None else NodeConfig(url, name)
        self.archive = spec.archive
        self.state_blocks = spec.state_blocks
        self.groups = frozenset(spec.groups)
        # The widest eth_getLogs range it takes (0 = none known): declared, then
        # lowered by what its refusals taught (gateway/rpc/logsplit.py).
        self.logs_limit = spec.max_logs_range
        self.url = url
        self.ws_url = ws_url  # its newHeads source ("" = polling only)
        self.name = name
        self.display = redact_url(url)
        self.healthy = False  # last probe answered (nothing known before the first)
        self.verified = False  # its eth_chainId matched the network's at the last check
        self.chain_id: int | None = None  # what it said at the last check (None: no answer)
        self.last_error = ""  # why it is out of service, for /readyz ("" while in)
        self.head = 0
        self.lagging = False
        self.consecutive_failures = 0
        self.down_until = 0.0  # taken out until this monotonic time
        self.in_flight = 0  # calls and requests counted in metrics, not here
        self.metrics = metrics
        self.transport: Transport | None = None
        self.newheads = False  # its newHeads subscription is live right now
        # Why its word about the chain took it out of rotation ("" = it did not),
        # and until when (monotonic); see gateway.intel.head.
        self.inconsistent = ""
        self.inconsistent_until = 0.0
        # An operator's cordon ({"by": token name, "at": ms}; None = none): the
        # node is still probed and still has its say in the head, but gets no
        # new client call (gateway/store/cordons.py keeps it in step with Redis).
        self.cordon: dict[str, object] | None = None
        self.calls_ok = 0  # attempts answered / failed in this process (the admin API's rate)
        self.calls_failed = 0

    def in_service(self) -> bool:
        """Answered its last probe on the right chain, its word consistent (cooldown aside)."""
        return self.healthy and self.verified and not self.inconsistent

    def usable(self, now: float) -> bool:
        """In service, not cooling down and not cordoned: a client call may go here now."""
        return (
            self.healthy
            and self.verified
            and not self.inconsistent
            and now >= self.down_until
            and self.cordon is None
        )

    def __repr__(self) -> str:  # never the URL: it may carry a provider key
        return f"<Node {self.name} healthy={self.healthy} head={self.head}>"
