"""Upstream node pools: routing, retries, hedging and the life of a network's nodes.

One ``NodePool`` per network. The parts live beside it: ``node`` (what is
known of one node), ``transport`` (how a call reaches it: the lean client or
aiohttp), ``errors`` (the one error type and HTTP status mapping),
``health`` (the probe that verifies the chain and marks nodes in or out of
service) and ``newheads`` (the ``newHeads`` subscriptions that move the head).
This module stays whole (over 300 lines, most of it this docstring and the
hot path) because picking, the retry rules and one attempt share the node
state, the deadline and the budget of a single call.

Routing: each call goes to the best node by tier, then by fewest calls in
flight, round robin among equals. Only nodes *in service* (last probe
answered, chain id verified) are ever picked: tier 0 "fresh", tier 1
"lagging" (more than ``max_lag_blocks`` behind the best node), tier 2
"cooling down" (taken out after ``fail_threshold`` failures in a row for
``cooldown_s``), tried only when nothing better is left. With no node in
service at all, ``forward`` fails at once (502): the gateway answers
nothing it cannot vouch for (SPEC §7).

Retries: a failed call is retried on a *different* node (once every node
was tried, e.g. one by a hedge, on any node but the one that failed last) while the deadline
(``limits.upstream_timeout_s``, one for all attempts) and the retry budget
(``retry_budget`` extra attempts per first attempt, e.g. 0.2 = at most 20 %
extra load) allow. Each attempt is capped at ``attempt_timeout_s`` so a slow
node leaves time for another. A call that is not idempotent
(``eth_sendRawTransaction``) is retried only when it certainly never reached
the node (connect refused or timed out) or the node refused it with 429;
once it may have been received it is never sent again.

Hedging: an allowlisted read (``intel.methods.READS``, asked with
``hedge=True``) whose node has not answered after that node's recent p95
latency (clamped to ``[hedge].floor_s``/``ceiling_s``) is also sent to a
second node; the first good answer wins, the other is cancelled. Hedges and
retries draw from one budget (``retry_budget``). Writes are never hedged.
Bodies travel as bytes: the pool never parses what it forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.config import Config, NetworkConfig, UpstreamConfig, node_table
from gateway.intel.head import HeadReport
from gateway.intel.hedge import Launch, run_hedged, timed
from gateway.intel.network import NetworkIntel
from gateway.ops.metrics import Metrics
from gateway.redis.failurelog import RateLimitedLog
from gateway.upstream.eligible import ANY, Eligibility, Route
from gateway.upstream.errors import UpstreamError
from gateway.upstream.headcheck import HeadConfirms
from gateway.upstream.health import Health
from gateway.upstream.newheads import HeadFeeds, HeadFollower, ws_urls
from gateway.upstream.node import Node
from gateway.upstream.nodeclient import NodeClient, NodeStream
from gateway.upstream.transport import AiohttpTransport, LeanTransport

# Node and UpstreamError live in their own modules; importers reach them here too.
__all__ = ["Node", "NodePool", "UpstreamError"]

log = logging.getLogger("gateway.upstream")

_DOWN_PROBE_S = 0.5  # the probe interval while no node of the network is in service


class NodePool:
    """The nodes of one network; ``forward`` is the only hot-path entry."""

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
            extra={
                "network": self.network.name,
                "node": node.name,
                "target": node.display,
                "error_class": "Inconsistent",
                "error": reason,
            },
        )
        self.intel.set_serving(any(n.in_service() for n in self.nodes))

    async def close(self) -> None:
        await self.feeds.close()
        await self.confirms.close()
        for node in self.nodes:
            if node.transport is not None:
                await node.transport.close()
                node.transport = None
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- routing -------------------------------------------------------------
    def pick(
        self,
        exclude: tuple[Node, ...] | list[Node] = (),
        min_block: int = -1,
        route: Route = ANY,
    ) -> Node | None:
        """The best node not in ``exclude``: tier, then fewest in flight, round robin.

        ``route``: only nodes it allows (the state a call reads, its method's
        group: ``upstream.eligible``).

        ``min_block >= 0``: the call names that block, so nodes whose last
        reported head is below it are skipped while any node is known to have
        it (SPEC §10); when none is, the pick is as usual (a node may have
        moved on since its probe).
        """
        nodes = self.nodes
        n = len(nodes)
        start = self._next
        if not exclude:  # a retry does not move the rotation on
            self._next = start + 1 if start + 1 < n else 0
        if min_block >= 0:
            having = self.intel.heads.nodes_with(min_block)
            if having and len(having) < n:
                exclude = (*exclude, *(node for node in nodes if node.name not in having))
        now = self.clock()
        best: Node | None = None
        best_rank = 0
        narrowed = route is not ANY
        head = self.intel.heads.head.number
        for i in range(n):
            node = nodes[(start + i) % n]
            if exclude and node in exclude:
                continue
            if not (node.healthy and node.verified) or node.inconsistent:
                continue  # out of service: never a client call
            if narrowed and not route.allows(node, head):
                continue
            if now >= node.down_until:
                rank = node.in_flight + (1 << 20 if node.lagging else 0)
            else:
                rank = node.in_flight + (1 << 40)
            if best is None or rank < best_rank:
                best, best_rank = node, rank
        return best

    def healthy_count(self) -> int:
        now = self.clock()
        return sum(1 for node in self.nodes if node.usable(now))

    def summary(self) -> dict[str, int]:
        """Node counts for /readyz: configured, in rotation, in rotation and fresh."""
        now = self.clock()
        usable = [node for node in self.nodes if node.usable(now)]
        return {
            "nodes": len(self.nodes),
            "healthy": len(usable),
            "fresh": sum(1 for node in usable if not node.lagging),
        }

    def serving(self) -> bool:
        """Whether any node is in service (verified, answered its last probe)."""
        return self.intel.serving

    def report(self) -> dict[str, Any]:
        """This network for /readyz (``Health.report``)."""
        return self.health.report(self.clock(), self.summary())

    # -- forwarding ----------------------------------------------------------
    async def forward(
        self,
        body: bytes,
        *,
        idempotent: bool = True,
        stream_over: int | None = None,
        hedge: bool = False,
        min_block: int = -1,
        route: Route = ANY,
    ) -> bytes | NodeStream:
        """POST ``body`` to a node and return its answer (any 2xx); see ``forward_from``."""
        payload, _ = await self.forward_from(
            body,
            idempotent=idempotent,
            stream_over=stream_over,
            hedge=hedge,
            min_block=min_block,
            route=route,
        )
        return payload

    async def forward_from(
        self,
        body: bytes,
        *,
        idempotent: bool = True,
        stream_over: int | None = None,
        hedge: bool = False,
        min_block: int = -1,
        route: Route = ANY,
        avoid: Node | None = None,
    ) -> tuple[bytes | NodeStream, Node]:
        """POST ``body`` to a node: its answer (any 2xx) and the node that gave it.

        The answer is its bytes; with ``stream_over`` (lean client only) a
        longer 2xx answer comes as a ``NodeStream`` the caller must read to
        the end or close. ``hedge``: the body is an allowlisted read, so a
        slow node gets a second node asked after its hedge delay.
        ``min_block``: the highest block the call names (routing). ``route``:
        the nodes that may take it, and its own deadline (``timeout_s``, one
        attempt may use all of it); ``avoid``: a node not to ask (it just
        answered this call from behind). Raises
        ``UpstreamError`` once the attempts, the deadline or the budget run
        out (see the module docstring), or for an answer over
        ``max_response_bytes``.
        """
        assert self.session is not None, "NodePool.start() was not awaited"
        intel = self.intel
        if not intel.serving:
            raise UpstreamError(
                f"{self.network.name}: no upstream node in service", sent=False, node_fault=False
            )
        own = route.timeout_s
        deadline = self.clock() + (own or self.total_timeout_s)
        attempt_s = own or self.attempt_timeout_s
        tried: list[Node] = [] if avoid is None else [avoid]
        flying: list[Node] = []  # nodes with an attempt of this call in flight
        failed_last: list[Node] = []  # the node whose attempt failed last (at most one)
        hedging = hedge and intel.hedging
        latency = intel.latency

        def factory(n: int) -> Launch[tuple[bytes | NodeStream, Node]] | None:
            node = self.pick(tried, min_block, route)
            if node is None and n:
                # Every node was tried (a hedge took the other one): a retry may
                # ask again a node whose attempt has ended, but not the one that
                # failed last (so a one-node pool is still never asked twice).
                node = self.pick((*flying, *failed_last), min_block, route)
            if node is None:
                return None
            if n and tried and tried[-1].metrics is not None:
                tried[-1].metrics.retry.inc()
            tried.append(node)
            return Launch(attempt(node), latency.delay(node.name) if hedging else None)

        async def attempt(node: Node) -> tuple[bytes | NodeStream, Node]:
            # The attempt's coroutine is made only once its task runs: a task
            # cancelled before its first step (a hedge that lost at once, the
            # deadline) leaves no coroutine that was never awaited.
            one = self._attempt_on(node, body, deadline, stream_over, attempt_s)
            flying.append(node)
            try:
                return await timed(latency, node.name, one, self.clock)
            except Exception:
                failed_last[:] = [node]
                raise
            finally:
                flying.remove(node)

        def retryable(exc: BaseException) -> bool:
            if not isinstance(exc, UpstreamError) or exc.too_large:
                return False
            return idempotent or not exc.sent or exc.resend_ok

        try:
            async with asyncio.timeout(max(0.0, deadline - self.clock()) + 0.05):
                return await run_hedged(
                    factory,
                    intel.budget,
                    max_attempts=self.max_attempts,
                    retryable=retryable,
                    stats=intel.hedge_stats,
                    discard=_discard,
                )
        except LookupError:
            raise UpstreamError(f"{self.network.name}: no upstream node configured") from None
        except TimeoutError:
            raise UpstreamError(f"{self.network.name}: deadline reached", timeout=True) from None

    def in_service(self) -> list[Node]:
        """The nodes a client call may go to now (in service, not cooling down)."""
        now = self.clock()
        return [node for node in self.nodes if node.usable(now)]

    async def send_to(self, node: Node, body: bytes, timeout_s: float) -> bytes:
        """POST ``body`` to ``node`` alone, once (a transaction broadcast sends to each).

        Counted, timed and judged like any attempt (a failing node is taken
        out as usual); raises ``UpstreamError``.
        """
        timeout_s = min(timeout_s, self.total_timeout_s)
        deadline = self.clock() + timeout_s
        payload, _ = await self._attempt_on(node, body, deadline, None, timeout_s)
        assert isinstance(payload, bytes)  # no stream_over: always buffered
        return payload

    async def _attempt_on(
        self,
        node: Node,
        body: bytes,
        deadline: float,
        stream_over: int | None,
        attempt_s: float,
    ) -> tuple[bytes | NodeStream, Node]:
        """One attempt on ``node``, capped at the attempt timeout and what is left of the deadline.

        A cancelled attempt (a hedge's loser, or the caller gone) is not the
        node's failure: it was merely slower.
        """
        remaining = deadline - self.clock()
        if remaining <= 0.001:
            raise UpstreamError(f"{self.network.name}: deadline reached", timeout=True)
        transport = node.transport
        assert transport is not None, "NodePool.start() was not awaited"
        metrics = node.metrics
        started = time.perf_counter()
        node.in_flight += 1
        try:
            payload = await transport.post(
                body, min(remaining, attempt_s), self.max_response_bytes, stream_over
            )
        except UpstreamError as exc:
            if metrics is not None:
                metrics.latency.observe(time.perf_counter() - started)
            self._failed(node, exc)
            raise
        finally:
            node.in_flight -= 1
        node.consecutive_failures = 0
        if metrics is not None:
            metrics.latency.observe(time.perf_counter() - started)
            metrics.ok.inc()
        return payload, node

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
                        extra={
                            "network": self.network.name,
                            "node": node.name,
                            "target": node.display,
                            "error_class": "UpstreamError",
                            "error": str(exc),
                        },
                    )

    # -- health --------------------------------------------------------------
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
                        extra={
                            "network": self.network.name,
                            "node": node.name,
                            "target": node.display,
                        },
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

    async def __aenter__(self) -> NodePool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.close()


def _discard(result: tuple[bytes | NodeStream, Node]) -> None:
    """A second good answer nobody will read (a hedge that finished with the winner)."""
    if isinstance(result[0], NodeStream):
        result[0].close()
