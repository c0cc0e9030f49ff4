"""Health checks: each probe asks every node for its heads *and* its chain id.

One batch per node per ``upstream.probe_interval_s`` (and at start-up,
before the pool takes any call): ``eth_getBlockByNumber`` latest, safe and
finalized, and ``eth_chainId``. A node is *in service* only while its last
probe answered and its chain id matched the network's ``chain_id``; a
mismatch takes it out of rotation, is logged with its redacted URL
and both ids, and shows in ``/readyz`` and ``gateway_upstream_chain_mismatch``.
Only an in-service node's heads move the network head: a node of another
chain would otherwise drag the head (and every cached answer) to its own.
The probe's latest block is an HTTP answer, so it vouches for its number
and hash under the head tracker's one rule (``gateway.intel.head``); a
node the rule finds inconsistent leaves service there and then.

Every failure line names the node, its redacted URL, the error class and
message; lines are rate-limited per node and kind (``RateLimitedLog``) and a
node coming back says so. When no node is left in service, the network's
head-dependent cache entries are dropped (``NetworkIntel.set_serving``), so
nothing the gateway can no longer vouch for is answered from memory.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import orjson

from gateway.config import NetworkConfig, UpstreamConfig
from gateway.intel.head import PROBE_BODY, HeadReport, parse_probe
from gateway.intel.network import NetworkIntel
from gateway.redis.failurelog import RateLimitedLog, error_fields
from gateway.telemetry.metrics import NetworkIntelMetrics
from gateway.upstream.node import Node
from gateway.upstream.transport import JSON_HEADERS

log = logging.getLogger("gateway.upstream")

# The head probe plus eth_chainId: one round trip checks both. The chain
# check's id is a string no client call carries (the gateway's own ids are
# integers), so the mock nodes can leave it out of their call counts.
CHAIN_CHECK_ID: Final = "gateway-chain-check"
CHECK_BODY: Final = (
    PROBE_BODY[:-1]
    + b',{"jsonrpc":"2.0","id":"%s","method":"eth_chainId"}]' % CHAIN_CHECK_ID.encode()
)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What one probe of one node found; ``error`` = (class, message) when it failed."""

    report: HeadReport | None = None
    chain_id: int | None = None
    error: tuple[str, str] | None = None


def parse_chain_id(reply: bytes) -> int | None:
    """The ``eth_chainId`` answer in a ``CHECK_BODY`` reply; None if absent or junk."""
    try:
        answers = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return None
    for item in answers if type(answers) is list else [answers]:
        if type(item) is dict and item.get("id") == CHAIN_CHECK_ID:
            value = item.get("result")
            if type(value) is str and value[:2] in ("0x", "0X") and len(value) <= 18:
                try:
                    return int(value, 16)
                except ValueError:
                    return None
    return None


async def check_node(
    session: aiohttp.ClientSession, node: Node, limit: aiohttp.ClientTimeout
) -> CheckResult:
    """Probe one node; never raises for anything the node does."""
    try:
        async with session.post(
            node.url, data=CHECK_BODY, headers=JSON_HEADERS, timeout=limit
        ) as resp:
            if resp.status != 200:
                return CheckResult(error=("HTTPStatus", f"HTTP {resp.status}"))
            body = await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return CheckResult(error=error_fields(exc, node.url))
    report = parse_probe(body)
    # a hostile node's absurd head would break the metrics and lag math
    if report is None or not 0 <= report.number < 1 << 63:
        return CheckResult(error=("BadAnswer", "no usable latest block in the probe answer"))
    return CheckResult(report, parse_chain_id(body))


@dataclass(eq=False)
class Health:
    """Applies probe results to one network's nodes, logging what changed."""

    network: NetworkConfig
    cfg: UpstreamConfig
    nodes: list[Node]
    intel: NetworkIntel
    intel_metrics: NetworkIntelMetrics | None
    lines: RateLimitedLog

    async def probe(self, session: aiohttp.ClientSession, limit: aiohttp.ClientTimeout) -> None:
        results = await asyncio.gather(*(check_node(session, n, limit) for n in self.nodes))
        self.apply(list(results))

    def apply(self, results: list[CheckResult]) -> None:
        """Mark each node in/out of service and lagging; feed the heads of those in service."""
        intel = self.intel
        want = self.network.chain_id
        for node, res in zip(self.nodes, results, strict=True):
            was = node.in_service()
            if res.report is None:
                node.healthy = False
                cls, message = res.error or ("NoAnswer", "no answer")
                node.last_error = f"{cls}: {message}"
                self._fail(
                    node, "probe", f"error={node.last_error}", error_class=cls, error=message
                )
            else:
                node.healthy = True
                node.chain_id = res.chain_id
                node.verified = res.chain_id == want
                if not node.verified:
                    got = "none" if res.chain_id is None else str(res.chain_id)
                    node.last_error = f"chain id {got}, expected {want}"
                    self._fail(
                        node,
                        "chain",
                        f"chain_id={got} expected={want}",
                        chain_id=res.chain_id,
                        expected_chain_id=want,
                    )
                else:
                    why = node.inconsistent
                    node.last_error = f"inconsistent: {why}" if why else ""
            if node.metrics is not None and res.report is not None:
                node.metrics.chain_mismatch.set(0 if node.verified else 1)
            if node.in_service():
                assert res.report is not None
                intel.observe_head(node.name, res.report)  # may find it inconsistent
                confirmed = intel.heads.node_head(node.name)
                if confirmed is not None:
                    node.head = confirmed
            if node.in_service():
                failed_before = self.lines.recovered((node.name, "probe"))
                failed_before |= self.lines.recovered((node.name, "chain"))
                if not was or failed_before:
                    self._line(logging.INFO, "upstream in service", node, f"head={node.head}")
            else:
                intel.forget(node.name)  # nothing it said stays in force
        best = max((n.head for n in self.nodes if n.in_service()), default=0)
        for node in self.nodes:
            lagging = node.in_service() and best - node.head > self.cfg.max_lag_blocks
            if lagging and not node.lagging:
                detail = f"head={node.head} best={best}"
                self._line(logging.WARNING, "upstream lagging", node, detail)
            node.lagging = lagging
            if node.metrics is not None and node.in_service():
                node.metrics.head.set(node.head)
        intel.set_serving(any(n.in_service() for n in self.nodes))
        if self.intel_metrics is not None:
            self.intel_metrics.sync(intel)

    def _fail(self, node: Node, kind: str, detail: str, **fields: Any) -> None:
        suppressed = self.lines.failed((node.name, kind))
        if suppressed is not None:
            what = "upstream on the wrong chain" if kind == "chain" else "upstream probe failed"
            detail = f"{detail} suppressed={suppressed}"
            self._line(logging.WARNING, what, node, detail, suppressed=suppressed, **fields)

    def _line(self, level: int, what: str, node: Node, detail: str, **fields: Any) -> None:
        """One line with its fields also as ``extra`` (JSON log lines carry them as keys)."""
        log.log(
            level,
            "%s network=%s node=%s url=%s %s",
            what,
            self.network.name,
            node.name,
            node.display,
            detail,
            extra={
                "network": self.network.name,
                "node": node.name,
                "target": node.display,
                **fields,
            },
        )

    def report(self, now: float, counts: dict[str, int]) -> dict[str, Any]:
        """This network for /readyz: counts, the head, and each node (redacted URL, why out)."""
        upstreams = [
            {
                "node": node.name,
                "url": node.display,
                "in_service": node.usable(now),
                "healthy": node.healthy,
                "verified": node.verified,
                "chain_id": node.chain_id,
                "head": node.head,
                "lagging": node.lagging,
                "current": self.intel.heads.current(node.name),
                "inconsistent": node.inconsistent or None,
                "newheads": node.newheads,
                "cordoned": node.cordon,
                "error": node.last_error or None,
            }
            for node in self.nodes
        ]
        return {
            "ready": self.intel.serving,
            "chain_id": self.network.chain_id,
            "head": self.intel.heads.head.number,
            # The current nodes confirmed different blocks above the head: it
            # stays at the last block they agree on until they agree again.
            "split": self.intel.heads.split,
            **counts,
            "upstreams": upstreams,
        }
