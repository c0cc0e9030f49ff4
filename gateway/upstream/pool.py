"""Upstream node pools: pooled sessions, health probes, retries, timeouts.

One ``NodePool`` per network, one ``aiohttp.ClientSession`` per pool (a
per-node connection limit, keep-alive, connect and total timeouts).

Routing: each call goes to the best node by tier, then by fewest calls in
flight, round robin among equals. Tier 0 is "in rotation and fresh"; tier 1
"in rotation but lagging" (more than ``max_lag_blocks`` behind the best
head the probe saw); tier 2 "out of rotation" (probe failed, or taken out
after ``fail_threshold`` failures in a row for ``cooldown_s``), tried only
when nothing better is left, so a pool whose every node looks down still
tries instead of failing without asking anyone.

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
retries draw from one budget (``retry_budget``), so a network slow
everywhere gets at most that much extra load. Writes are never hedged.

Health: a background probe asks every node for its latest, safe and
finalized blocks (one batch, ``intel.head.PROBE_BODY``) each
``probe_interval_s``; the answers feed the network's ``HeadTracker`` (one
monotonic head per network) and per-node lag. A node whose probe fails leaves the rotation until a
probe succeeds; a node taken out by failures comes back only after its
cooldown *and* a successful probe. Bodies travel as bytes: the pool never
parses what it forwards. Node URLs may hold a provider's secret, so logs and
metrics name nodes ``<network>-<index>``, never by URL.

Transport: ``upstream.client = "lean"`` (default) sends calls through
``gateway.nodeclient`` (keep-alive connections + aiohttp's C response
parser; ~35 µs of CPU per call against ~140 µs through a ClientSession, see
docs/PERFORMANCE.md); ``"aiohttp"`` uses the pooled ``ClientSession``.
Probes always use the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Final

import aiohttp

from gateway.config import Config, NetworkConfig, UpstreamConfig
from gateway.intel.head import PROBE_BODY, HeadReport, parse_probe
from gateway.intel.hedge import Launch, run_hedged, timed
from gateway.intel.network import NetworkIntel
from gateway.ops.metrics import Metrics, NodeMetrics
from gateway.upstream.nodeclient import NodeClient, NodeStream, UpstreamError

__all__ = ["Node", "NodePool", "UpstreamError"]  # UpstreamError: nodeclient's, shared

log = logging.getLogger("gateway.upstream")

_JSON_HEADERS: Final = {"Content-Type": "application/json"}
# A node's 4xx answer that judges the request, not the node: relayed when JSON.
_RELAYED_4XX: Final = frozenset({400, 413, 422})


class Node:
    """One upstream node and what the pool knows about it."""

    __slots__ = (
        "client",
        "consecutive_failures",
        "down_until",
        "head",
        "healthy",
        "in_flight",
        "lagging",
        "metrics",
        "name",
        "url",
    )

    def __init__(self, url: str, name: str, metrics: NodeMetrics | None = None) -> None:
        self.url = url
        self.name = name
        self.healthy = True  # last probe answered (optimistic until the first probe)
        self.head = 0
        self.lagging = False
        self.consecutive_failures = 0
        self.down_until = 0.0  # taken out until this monotonic time
        self.in_flight = 0  # calls and requests counted in metrics, not here
        self.metrics = metrics
        self.client: NodeClient | None = None

    def usable(self, now: float) -> bool:
        return self.healthy and now >= self.down_until

    def __repr__(self) -> str:  # never the URL: it may carry a provider key
        return f"<Node {self.name} healthy={self.healthy} head={self.head}>"


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
                url,
                f"{network.name}-{i}",
                metrics.node(network.name, f"{network.name}-{i}") if metrics else None,
            )
            for i, url in enumerate(network.upstreams)
        ]
        self._next = 0
        whole = config if config is not None else Config(upstream=cfg)
        # One network's heads, latencies, hedge budget, cache and coalescer.
        self.intel = NetworkIntel.from_config(
            whole, network.name, [n.name for n in self.nodes], redis=redis, clock=clock
        )
        self.intel_metrics = metrics.intel(network.name) if metrics else None
        self._attempt_timeout = aiohttp.ClientTimeout(
            total=self.attempt_timeout_s, sock_connect=connect_timeout_s
        )
        probe_s = cfg.probe_timeout_s or self.attempt_timeout_s
        self._probe_timeout = aiohttp.ClientTimeout(
            total=probe_s, sock_connect=min(connect_timeout_s, probe_s)
        )
        for node in self.nodes:
            if node.metrics is not None:
                node.metrics.healthy.set(1)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=self.cfg.connections_per_node,
            keepalive_timeout=self.cfg.keepalive_s,
            ttl_dns_cache=300,
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
            timeout=aiohttp.ClientTimeout(
                total=self.total_timeout_s, sock_connect=self.connect_timeout_s
            ),
        )
        if self.cfg.client == "lean":
            for node in self.nodes:
                node.client = NodeClient(
                    node.url,
                    max_connections=self.cfg.connections_per_node,
                    connect_timeout_s=self.connect_timeout_s,
                    idle_timeout_s=self.cfg.keepalive_s,
                )

    async def close(self) -> None:
        for node in self.nodes:
            if node.client is not None:
                await node.client.close()
                node.client = None
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- routing -------------------------------------------------------------
    def pick(self, exclude: tuple[Node, ...] | list[Node] = (), min_block: int = -1) -> Node | None:
        """The best node not in ``exclude``: tier, then fewest in flight, round robin.

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
        for i in range(n):
            node = nodes[(start + i) % n]
            if exclude and node in exclude:
                continue
            if node.healthy and now >= node.down_until:
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

    # -- forwarding ----------------------------------------------------------
    async def forward(
        self,
        body: bytes,
        *,
        idempotent: bool = True,
        stream_over: int | None = None,
        hedge: bool = False,
        min_block: int = -1,
    ) -> bytes | NodeStream:
        """POST ``body`` to a node and return its answer (any 2xx); see ``forward_from``."""
        payload, _ = await self.forward_from(
            body, idempotent=idempotent, stream_over=stream_over, hedge=hedge, min_block=min_block
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
    ) -> tuple[bytes | NodeStream, Node]:
        """POST ``body`` to a node: its answer (any 2xx) and the node that gave it.

        The answer is its bytes; with ``stream_over`` (lean client only) a
        longer 2xx answer comes as a ``NodeStream`` the caller must read to
        the end or close. ``hedge``: the body is an allowlisted read, so a
        slow node gets a second node asked after its hedge delay.
        ``min_block``: the highest block the call names (routing). Raises
        ``UpstreamError`` once the attempts, the deadline or the budget run
        out (see the module docstring), or for an answer over
        ``max_response_bytes``.
        """
        assert self.session is not None, "NodePool.start() was not awaited"
        intel = self.intel
        deadline = self.clock() + self.total_timeout_s
        tried: list[Node] = []
        flying: list[Node] = []  # nodes with an attempt of this call in flight
        failed_last: list[Node] = []  # the node whose attempt failed last (at most one)
        hedging = hedge and intel.hedging
        latency = intel.latency

        def factory(n: int) -> Launch[tuple[bytes | NodeStream, Node]] | None:
            node = self.pick(tried, min_block)
            if node is None and n:
                # Every node was tried (a hedge took the other one): a retry may
                # ask again a node whose attempt has ended, but not the one that
                # failed last (so a one-node pool is still never asked twice).
                node = self.pick((*flying, *failed_last), min_block)
            if node is None:
                return None
            if n and tried[-1].metrics is not None:
                tried[-1].metrics.retry.inc()
            tried.append(node)
            return Launch(attempt(node), latency.delay(node.name) if hedging else None)

        async def attempt(node: Node) -> tuple[bytes | NodeStream, Node]:
            # The attempt's coroutine is made only once its task runs: a task
            # cancelled before its first step (a hedge that lost at once, the
            # deadline) leaves no coroutine that was never awaited.
            one = self._attempt_on(node, body, deadline, stream_over)
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

    async def _attempt_on(
        self, node: Node, body: bytes, deadline: float, stream_over: int | None
    ) -> tuple[bytes | NodeStream, Node]:
        """One attempt on ``node``, capped at the attempt timeout and what is left of the deadline.

        A cancelled attempt (a hedge's loser, or the caller gone) is not the
        node's failure: it was merely slower.
        """
        remaining = deadline - self.clock()
        if remaining <= 0.001:
            raise UpstreamError(f"{self.network.name}: deadline reached", timeout=True)
        node.in_flight += 1
        started = time.monotonic()
        try:
            if node.client is not None:
                payload = await _lean_attempt(
                    node,
                    node.client,
                    body,
                    min(remaining, self.attempt_timeout_s),
                    self.max_response_bytes,
                    stream_over,
                )
            else:
                session = self.session
                assert session is not None
                timeout = (
                    self._attempt_timeout
                    if remaining >= self.attempt_timeout_s
                    else aiohttp.ClientTimeout(total=remaining, sock_connect=self.connect_timeout_s)
                )
                payload = await self._attempt(session, node, body, timeout, self.max_response_bytes)
        except UpstreamError as exc:
            self._failed(node, exc)
            raise
        finally:
            node.in_flight -= 1
        node.consecutive_failures = 0
        if node.metrics is not None:
            node.metrics.ok.inc()
            node.metrics.latency.observe(time.monotonic() - started)
        return payload, node

    @staticmethod
    async def _attempt(
        session: aiohttp.ClientSession,
        node: Node,
        body: bytes,
        limit: aiohttp.ClientTimeout,
        max_bytes: int | None,
    ) -> bytes:
        try:
            async with session.post(
                node.url, data=body, headers=_JSON_HEADERS, timeout=limit
            ) as resp:
                status = resp.status
                if max_bytes is None:
                    payload = await resp.read()
                else:
                    if resp.content_length is not None and resp.content_length > max_bytes:
                        raise _too_large(node)
                    payload = await resp.content.read(max_bytes + 1)
                    while not resp.content.at_eof() and len(payload) <= max_bytes:
                        payload += await resp.content.read(max_bytes + 1 - len(payload))
                    if len(payload) > max_bytes:
                        raise _too_large(node)
        except aiohttp.ConnectionTimeoutError:
            raise UpstreamError(
                f"{node.name}: connect timed out", timeout=True, sent=False
            ) from None
        except TimeoutError:
            raise UpstreamError(f"{node.name}: timed out", timeout=True) from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(
                f"{node.name}: unreachable ({exc.os_error.__class__.__name__})", sent=False
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"{node.name}: failed ({exc.__class__.__name__})") from None
        answer = _judge(node, status, payload)
        assert isinstance(answer, bytes)  # this transport never streams
        return answer

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
                log.warning(
                    "node taken out node=%s for_s=%s last_error=%s",
                    node.name,
                    self.cfg.cooldown_s,
                    exc,
                )

    # -- health --------------------------------------------------------------
    async def probe_once(self) -> None:
        """Ask every node for its heads; mark down, lagging, or back in rotation.

        The reports feed the network's ``HeadTracker`` (which drops head-keyed
        cache entries when the head moves); lag is measured against the
        network head, which never goes back.
        """
        reports = await asyncio.gather(*(self._probe(node) for node in self.nodes))
        intel = self.intel
        heads = intel.heads
        for node, report in zip(self.nodes, reports, strict=True):
            if report is None:
                heads.forget(node.name)
            else:
                intel.observe_head(node.name, report)
        best = max((r.number for r in reports if r is not None), default=0)
        now = self.clock()
        for node, report in zip(self.nodes, reports, strict=True):
            was_in = node.usable(now) and not node.lagging
            if report is None:
                if node.healthy:
                    log.warning("node probe failed node=%s", node.name)
                node.healthy = False
            else:
                head = report.number
                node.head = head
                # Lagging is judged against the best node answering now (when
                # the fresh node is down, the next best is the best there is);
                # the lag metric is against the network head.
                node.lagging = best - head > self.cfg.max_lag_blocks
                if not node.healthy or (node.down_until and now >= node.down_until):
                    log.info("node back node=%s head=%s", node.name, head)
                    node.down_until = 0.0
                    node.consecutive_failures = 0
                node.healthy = True
            is_in = node.usable(now) and not node.lagging
            if node.lagging and was_in:
                log.warning("node lagging node=%s head=%s best=%s", node.name, node.head, best)
            if node.metrics is not None:
                node.metrics.healthy.set(1 if is_in else 0)
                if report is not None:
                    node.metrics.head.set(report.number)
        if self.intel_metrics is not None:
            self.intel_metrics.sync(intel)

    async def _probe(self, node: Node) -> HeadReport | None:
        session = self.session
        assert session is not None
        try:
            async with session.post(
                node.url, data=PROBE_BODY, headers=_JSON_HEADERS, timeout=self._probe_timeout
            ) as resp:
                if resp.status != 200:
                    return None
                report = parse_probe(await resp.read())
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        # a hostile node's absurd head would break the metrics and lag math
        if report is None or not 0 <= report.number < 1 << 63:
            return None
        return report

    async def probe_forever(self) -> None:
        task = asyncio.current_task()
        # stops once cancelled even if a client library swallowed the cancel
        while task is None or not task.cancelling():
            try:
                await self.probe_once()
            except Exception:  # a probe bug must not end health checking
                log.exception("probe failed network=%s", self.network.name)
            await asyncio.sleep(self.cfg.probe_interval_s)

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


def _too_large(node: Node) -> UpstreamError:
    return UpstreamError(
        f"{node.name}: answer over the size limit", node_fault=False, too_large=True
    )


def _judge(node: Node, status: int, payload: bytes | NodeStream) -> bytes | NodeStream:
    """The answer to relay, or ``UpstreamError`` saying whose fault it was."""
    if 200 <= status < 300:
        return payload
    assert isinstance(payload, bytes)  # only 2xx answers are streamed
    if status in _RELAYED_4XX and payload[:1] in (b"{", b"["):
        return payload  # a JSON-RPC answer about the request itself
    if status == 429:
        raise UpstreamError(f"{node.name}: HTTP 429", resend_ok=True)
    raise UpstreamError(
        f"{node.name}: HTTP {status}",
        node_fault=status >= 500 or status in (401, 403, 404, 405, 408),
    )


async def _lean_attempt(
    node: Node,
    client: NodeClient,
    body: bytes,
    timeout_s: float,
    max_bytes: int | None,
    stream_over: int | None,
) -> bytes | NodeStream:
    try:
        status, payload = await client.post(
            body, timeout_s, max_bytes=max_bytes, stream_over=stream_over
        )
    except UpstreamError as exc:
        if exc.too_large:
            raise _too_large(node) from None
        raise UpstreamError(f"{node.name}: {exc}", timeout=exc.timeout, sent=exc.sent) from None
    return _judge(node, status, payload)
