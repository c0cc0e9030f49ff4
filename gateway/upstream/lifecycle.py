"""The life of a network's nodes, the half of ``upstream.pool.NodePool`` that is not a call.

Made from the config with the network's intel, started (session, transports,
a first probe, ``newHeads`` followers), probed (``upstream.health``), taken
out of rotation (failures in a row, an inconsistent head) and back in (a probe
answered once the time out is over), closed. It stays whole because every
step is one node's life in order (made, started, probed, out, back, closed)
and each reads the same node list, intel and log limiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Self

import aiohttp

from gateway.config import Config, NetworkConfig, UpstreamConfig, node_table
from gateway.intel.head import HeadReport
from gateway.intel.network import NetworkIntel
from gateway.redis.failurelog import RateLimitedLog
from gateway.telemetry.metrics import Metrics
from gateway.upstream.eligible import Eligibility
from gateway.upstream.errors import UpstreamError
from gateway.upstream.headcheck import HeadConfirms
from gateway.upstream.health import Health
from gateway.upstream.newheads import HeadFeeds, HeadFollower, ws_urls
from gateway.upstream.node import Node
from gateway.upstream.nodeclient import NodeClient
from gateway.upstream.transport import AiohttpTransport, LeanTransport

log = logging.getLogger("gateway.upstream")

_DOWN_PROBE_S = 0.5  # the probe interval while no node of the network is in service


class PoolLifecycle:
    """The nodes of one network, their session and transports, probes and head followers."""

    def __init__(
        self,
        network: NetworkConfig,
        cfg: UpstreamConfig,
        connect_timeout_s: float,
        total_timeout_s: float,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_response_bytes: int | None = None,
        config: Config | None = None,
        redis: Any = None,
    ) -> None:
        """``config``: the whole config, for the ``[cache]``/``[hedge]`` intel parts
        (None: their defaults with this ``cfg``); ``redis``: the client of the
        optional shared cache tier."""
        self.network = network
        self.max_response_bytes = max_response_bytes
        self.clock = clock  # injectable for tests; monotonic seconds
        self.cfg = cfg
        self.connect_timeout_s = connect_timeout_s
        self.total_timeout_s = total_timeout_s
        attempt = cfg.attempt_timeout_s
        self.attempt_timeout_s = min(attempt, total_timeout_s) if attempt > 0 else total_timeout_s
        self.max_attempts = max(1, cfg.max_attempts)
        self.session: aiohttp.ClientSession | None = None
        self.nodes = [
            Node(
                spec.url,
                spec.name,  # the node table's name: logs, metrics, X-Gateway-Node
                metrics.node(network.name, spec.name) if metrics else None,
                ws_url=ws_url if cfg.ws_heads else "",
                spec=spec,
            )
            for spec, ws_url in zip(node_table(network), ws_urls(network), strict=True)
        ]
        self._next = 0
        whole = config if config is not None else Config(upstream=cfg)
        # One network's heads, latencies, hedge budget, cache and coalescer.
        self.intel = NetworkIntel.from_config(
            whole,
            network.name,
            [n.name for n in self.nodes],
            redis=redis,
            clock=clock,
            block_time_s=network.block_time_s,
        )
        self.head_cfg = whole.head
        self.intel.heads.on_eject = self._eject
        self.intel.heads.on_split = self._split
        self.confirms = HeadConfirms(self.intel, self.attempt_timeout_s)
        self.intel_metrics = metrics.intel(network.name) if metrics else None
        # History and method groups narrow the pick (gateway/upstream/eligible.py).
        self.eligibility = Eligibility(network, self.intel.heads)
        # One rate limiter for every failure line of this network's nodes.
        self.lines = RateLimitedLog(cfg.failure_log_interval_s)
        self.health = Health(network, cfg, self.nodes, self.intel, self.intel_metrics, self.lines)
        probe_s = cfg.probe_timeout_s or self.attempt_timeout_s
        self._probe_timeout = aiohttp.ClientTimeout(
            total=probe_s, sock_connect=min(connect_timeout_s, probe_s)
        )
        self._probe_soon = asyncio.Event()
        self.feeds = HeadFeeds()
        for node in self.nodes:
            if node.metrics is not None:
                node.metrics.healthy.set(0)  # nothing is in service before its first check

    async def start(self) -> None:
        """Open the session and the transports, then check every node once.

        The check comes before the first call: a node that has not answered
        it (or answered another chain id) gets no client calls.
        """
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=self.cfg.connections_per_node,
            keepalive_timeout=self.cfg.keepalive_s,
            ttl_dns_cache=300,
        )
        self.session = session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
            timeout=aiohttp.ClientTimeout(
                total=self.total_timeout_s, sock_connect=self.connect_timeout_s
            ),
        )
        for node in self.nodes:
            if self.cfg.client == "lean":
                client = NodeClient(
                    node.url,
                    max_connections=self.cfg.connections_per_node,
                    connect_timeout_s=self.connect_timeout_s,
                    idle_timeout_s=self.cfg.keepalive_s,
                )
                node.transport = LeanTransport(node.name, client)
            else:
                node.transport = AiohttpTransport(
                    node.name, node.url, session, self.connect_timeout_s
                )
        await self.probe_once()
        self._follow_heads(session)

    def _follow_heads(self, session: aiohttp.ClientSession) -> None:
        """One ``newHeads`` follower per node with a WebSocket URL, until ``close``."""
        self.feeds.start(
            [
                HeadFollower(
                    self.network.name,
                    node,
                    session,
                    self.cfg,
                    chain_id=self.network.chain_id,
                    on_head=self._on_ws_head,
                    on_lost=lambda _node: self._probe_soon.set(),
                    lines=self.lines,
                    connect_timeout_s=self.connect_timeout_s,
                )
                for node in self.nodes
                if node.ws_url
            ]
        )

    def _on_ws_head(self, node: Node, report: HeadReport) -> None:
        """A header from a node's subscription: a claim, confirmed by asking the node's HTTP."""
        if node.in_service() and self.intel.claim(node.name, report.number, report.hash):
            self.confirms.ask(node, report.number)

    def _eject(self, name: str, reason: str) -> None:
        """The head tracker found ``name``'s word inconsistent: out of rotation for a while."""
        node = next(n for n in self.nodes if n.name == name)
        node.inconsistent = reason
        node.inconsistent_until = self.clock() + self.head_cfg.inconsistent_cooldown_s
        node.last_error = f"inconsistent: {reason}"
        if node.metrics is not None:
            node.metrics.inconsistent.set(1)
            node.metrics.healthy.set(0)
        log.warning(
            "upstream inconsistent, out of rotation network=%s node=%s url=%s for_s=%s reason=%s",
            self.network.name,
            node.name,
            node.display,
            self.head_cfg.inconsistent_cooldown_s,
            reason,
            extra=self._fields(node, error_class="Inconsistent", error=reason),
        )
        self.intel.set_serving(any(n.in_service() for n in self.nodes))

    def _split(self, split: bool, detail: str) -> None:
        """The current nodes stopped (or started again) agreeing above the head."""
        if split:
            log.warning(
                "network split, head held at the last agreed block network=%s %s",
                self.network.name,
                detail,
                extra={"network": self.network.name, "error_class": "Split", "error": detail},
            )
        else:
            log.info("network agrees again network=%s %s", self.network.name, detail)

    def _fields(self, node: Node, **more: str) -> dict[str, str]:
        """The structured fields of a line about ``node`` (the URL redacted), plus ``more``."""
        return {"network": self.network.name, "node": node.name, "target": node.display, **more}

    async def close(self) -> None:
        """Stop the head followers and confirmations, close every transport and the session."""
        await self.feeds.close()
        await self.confirms.close()
        for node in self.nodes:
            if node.transport is not None:
                await node.transport.close()
                node.transport = None
        if self.session is not None:
            await self.session.close()
            self.session = None

    def _failed(self, node: Node, exc: UpstreamError) -> None:
        metrics = node.metrics
        if metrics is not None:
            (metrics.timeout if exc.timeout else metrics.error).inc()
        if not exc.node_fault:
            return
        node.consecutive_failures += 1
        if node.consecutive_failures >= self.cfg.fail_threshold:
            now = self.clock()
            if now >= node.down_until:
                node.down_until = now + self.cfg.cooldown_s
                node.consecutive_failures = 0
                if metrics is not None:
                    metrics.healthy.set(0)
                if self.lines.failed((node.name, "out")) is not None:
                    log.warning(
                        "upstream taken out network=%s node=%s url=%s for_s=%s "
                        "error=UpstreamError: %s",
                        self.network.name,
                        node.name,
                        node.display,
                        self.cfg.cooldown_s,
                        exc,
                        extra=self._fields(node, error_class="UpstreamError", error=str(exc)),
                    )

    async def probe_once(self) -> None:
        """Check every node (heads and chain id) and mark it in or out of service."""
        session = self.session
        assert session is not None, "NodePool.start() was not awaited"
        now = self.clock()
        for node in self.nodes:  # an inconsistent node's time out is over: judged afresh
            if node.inconsistent and now >= node.inconsistent_until:
                node.inconsistent = ""
                if node.metrics is not None:
                    node.metrics.inconsistent.set(0)
        await self.health.probe(session, self._probe_timeout)
        now = self.clock()
        for node in self.nodes:  # a probe that answered ends a cooldown that is over
            if node.down_until and now >= node.down_until and node.in_service():
                node.down_until = 0.0
                node.consecutive_failures = 0
                if self.lines.recovered((node.name, "out")):
                    log.info(
                        "upstream back in rotation network=%s node=%s url=%s",
                        self.network.name,
                        node.name,
                        node.display,
                        extra=self._fields(node),
                    )
            if node.metrics is not None:  # 1: in rotation and fresh
                node.metrics.healthy.set(1 if node.usable(now) and not node.lagging else 0)

    async def probe_forever(self) -> None:
        """Probe each ``probe_interval_s``, or at once when a head subscription was lost.

        While no node is in service the network answers nothing, so it is
        probed every ``_DOWN_PROBE_S`` at most: back within half a second of
        its nodes, not a whole interval later. While no node in service has a
        live ``newHeads`` subscription, the probe is the head's only source:
        it runs twice per ``block_time_s`` (when set), so ``latest`` stays
        within a block of the nodes.
        """
        task = asyncio.current_task()
        # stops once cancelled even if a client library swallowed the cancel
        while task is None or not task.cancelling():
            interval = self.cfg.probe_interval_s
            if not self.intel.serving:
                interval = min(interval, _DOWN_PROBE_S)
            elif self.network.block_time_s > 0 and not any(
                n.newheads for n in self.nodes if n.in_service()
            ):  # polling is the head's only source: twice a block keeps it within one
                interval = min(interval, self.network.block_time_s / 2)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._probe_soon.wait()
            self._probe_soon.clear()
            try:
                await self.probe_once()
            except Exception:  # a probe bug must not end health checking
                log.exception("probe failed network=%s", self.network.name)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.close()
