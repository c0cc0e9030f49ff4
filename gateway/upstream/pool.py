"""Upstream node pools: routing, retries and hedging of a network's calls.

One ``NodePool`` per network. The parts live beside it: ``lifecycle`` (the
pool's nodes made, started, probed, taken out and back in, closed), ``node``
(what is known of one node), ``transport`` (how a call reaches it: the lean
client or aiohttp), ``errors`` (the one error type and HTTP status mapping),
``health`` (the probe that verifies the chain) and ``newheads`` (the
``newHeads`` subscriptions that move the head).

Routing: each call goes to the best node by tier, then by fewest calls in
flight, round robin among equals. Only nodes *in service* (last probe
answered, chain id verified) are ever picked: tier 0 "fresh", tier 1
"lagging" (more than ``max_lag_blocks`` behind the best node), tier 2
"cooling down" (taken out after ``fail_threshold`` failures in a row for
``cooldown_s``), tried only when nothing better is left. A node an operator
cordoned (``Node.cordon``, the admin API) is never picked; calls already on
it finish. With no node in service at all, ``forward`` fails at once (502):
the gateway answers nothing it cannot vouch for.

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

It stays whole because picking, retrying and hedging share one call's
attempts: the nodes tried, the deadline and the budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from gateway.intel.hedge import Launch, run_hedged, timed
from gateway.upstream.eligible import ANY, Route
from gateway.upstream.errors import UpstreamError
from gateway.upstream.lifecycle import PoolLifecycle
from gateway.upstream.node import Node
from gateway.upstream.nodeclient import NodeStream

if TYPE_CHECKING:
    from gateway.telemetry.tracer import Tracer

# Node and UpstreamError live in their own modules; importers reach them here too.
__all__ = ["Node", "NodePool", "UpstreamError"]


class CallOptions(TypedDict, total=False):
    """What ``forward`` passes on to ``forward_from`` (whose docstring says what each means)."""

    idempotent: bool
    stream_over: int | None
    hedge: bool
    min_block: int
    route: Route


class NodePool(PoolLifecycle):
    """The nodes of one network; ``forward`` is the only hot-path entry."""

    # Each attempt's span (None: tracing is off); set by ``Pipeline.trace_with``.
    tracer: Tracer | None = None

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
        it; when none is, the pick is as usual (a node may have
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
            if node.cordon is not None:
                continue  # an operator's cordon: probed, but no new client call
            if narrowed and not route.allows(node, head):
                continue
            if now >= node.down_until:
                rank = node.in_flight + (1 << 20 if node.lagging else 0)
            else:
                rank = node.in_flight + (1 << 40)
            if best is None or rank < best_rank:
                best, best_rank = node, rank
        return best

    def route(self, calls: Iterable[tuple[str, Any]]) -> Route:
        """Which nodes may answer these (method, params) calls together: the state
        block they name, their node group and timeout, their logs span."""
        return self.eligibility.route(calls, self.nodes)

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
    async def forward(self, body: bytes, **how: Unpack[CallOptions]) -> bytes | NodeStream:
        """POST ``body`` to a node and return its answer (any 2xx); see ``forward_from``."""
        payload, _ = await self.forward_from(body, **how)
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
            return Launch(attempt(node, n), latency.delay(node.name) if hedging else None)

        async def attempt(node: Node, n: int) -> tuple[bytes | NodeStream, Node]:
            # The attempt's coroutine is made only once its task runs: a task
            # cancelled before its first step (a hedge that lost at once, the
            # deadline) leaves no coroutine that was never awaited.
            one = self._attempt_on(node, body, deadline, stream_over, attempt_s, n)
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
        nth: int = 0,
    ) -> tuple[bytes | NodeStream, Node]:
        """One attempt on ``node``, capped at the attempt timeout and what is left of the deadline.

        A cancelled attempt (a hedge's loser, or the caller gone) is not the
        node's failure: it was merely slower. ``nth``: the call's attempt
        number (0 first; hedges and retries after), for its span.
        """
        remaining = deadline - self.clock()
        if remaining <= 0.001:
            raise UpstreamError(f"{self.network.name}: deadline reached", timeout=True)
        transport = node.transport
        assert transport is not None, "NodePool.start() was not awaited"
        metrics = node.metrics
        tracer = self.tracer
        span = None if tracer is None else tracer.node_call(node.name, nth)
        started = time.perf_counter()
        node.in_flight += 1
        try:
            payload = await transport.post(
                body,
                min(remaining, attempt_s),
                self.max_response_bytes,
                stream_over,
                None if span is None else span.traceparent,
            )
        except UpstreamError as exc:
            node.calls_failed += 1
            if metrics is not None:
                metrics.latency.observe(time.perf_counter() - started)
            self._failed(node, exc)
            if span is not None:
                span.failed(str(exc))  # named after the node, never its URL
            raise
        except BaseException:
            if span is not None:
                span.cancelled()
            raise
        finally:
            node.in_flight -= 1
        node.calls_ok += 1
        if span is not None:
            span.done()
        node.consecutive_failures = 0
        if metrics is not None:
            metrics.latency.observe(time.perf_counter() - started)
            metrics.ok.inc()
        return payload, node


def _discard(result: tuple[bytes | NodeStream, Node]) -> None:
    """A second good answer nobody will read (a hedge that finished with the winner)."""
    if isinstance(result[0], NodeStream):
        result[0].close()
