"""Upstream node pools: pooled sessions, health probes, retries, timeouts.

One ``NodePool`` per network. Calls go to healthy, fresh nodes in turn; a
failed idempotent call is retried on another node while the deadline and
the retry budget allow; a node that fails ``fail_threshold`` times in a row
is taken out for ``cooldown_s`` and probed back in. Bodies travel as bytes:
the pool never parses what it forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from gateway.config import NetworkConfig, UpstreamConfig

log = logging.getLogger("gateway.upstream")

PROBE_BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
_JSON_HEADERS = {"Content-Type": "application/json"}


class UpstreamError(Exception):
    """No node produced an answer; ``timeout`` tells 504 from 502."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


@dataclass(slots=True)
class Node:
    url: str
    name: str
    healthy: bool = True
    head: int = 0
    lagging: bool = False
    consecutive_failures: int = 0
    down_until: float = 0.0
    requests: int = 0
    failures: int = 0

    def usable(self, now: float) -> bool:
        return self.healthy and now >= self.down_until


@dataclass(slots=True)
class _Budget:
    """Retries allowed as a fraction of recent first attempts (token bucket)."""

    ratio: float
    tokens: float = 10.0
    cap: float = 100.0

    def on_attempt(self) -> None:
        self.tokens = min(self.cap, self.tokens + self.ratio)

    def take(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


OnResult = Callable[[Node, str], None]  # (node, "ok" | "error" | "timeout" | "retry")


@dataclass(slots=True)
class NodePool:
    network: NetworkConfig
    cfg: UpstreamConfig
    connect_timeout_s: float
    total_timeout_s: float
    session: aiohttp.ClientSession | None = None
    nodes: list[Node] = field(default_factory=list)
    on_result: OnResult | None = None
    _next: int = 0
    _budget: _Budget = field(default_factory=lambda: _Budget(0.2))

    def __post_init__(self) -> None:
        self.nodes = [Node(url, f"{self.network.name}-{i}")
                      for i, url in enumerate(self.network.upstreams)]
        self._budget = _Budget(self.cfg.retry_budget)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.cfg.connections_per_node,
                                         keepalive_timeout=30, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"), json_serialize=_dumps,
            timeout=aiohttp.ClientTimeout(total=self.total_timeout_s,
                                          sock_connect=self.connect_timeout_s))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- routing -------------------------------------------------------------
    def pick(self, exclude: tuple[Node, ...] = ()) -> Node | None:
        """Next usable, fresh node (round robin); stale or cooling nodes as a last resort."""
        now = time.monotonic()
        n = len(self.nodes)
        for strict in (True, False):
            for i in range(n):
                node = self.nodes[(self._next + i) % n]
                if node in exclude:
                    continue
                if strict and (not node.usable(now) or node.lagging):
                    continue
                self._next = (self._next + i + 1) % n
                return node
        return None

    def healthy_count(self) -> int:
        now = time.monotonic()
        return sum(1 for node in self.nodes if node.usable(now))

    # -- forwarding ----------------------------------------------------------
    async def forward(self, body: bytes, *, idempotent: bool = True) -> bytes:
        """POST ``body`` to a node and return its answer bytes.

        Retries go to a different node and only for idempotent calls, or for
        any call whose connection failed before the request was sent.
        """
        assert self.session is not None, "NodePool.start() was not awaited"
        deadline = time.monotonic() + self.total_timeout_s
        tried: tuple[Node, ...] = ()
        self._budget.on_attempt()
        last: UpstreamError = UpstreamError("no upstream node configured")
        for attempt in range(max(1, self.cfg.max_attempts)):
            node = self.pick(tried)
            remaining = deadline - time.monotonic()
            if node is None or remaining <= 0:
                break
            if attempt and not self._budget.take():
                break
            tried += (node,)
            node.requests += 1
            sent = False
            try:
                async with self.session.post(
                        node.url, data=body, headers=_JSON_HEADERS,
                        timeout=aiohttp.ClientTimeout(total=remaining,
                                                      sock_connect=self.connect_timeout_s)
                ) as resp:
                    sent = True
                    payload = await resp.read()
                    if 200 <= resp.status < 300:
                        self._ok(node)
                        return payload
                    last = UpstreamError(f"{node.name} answered HTTP {resp.status}")
            except TimeoutError:
                sent = True
                last = UpstreamError(f"{node.name} timed out", timeout=True)
            except aiohttp.ClientConnectorError as exc:
                last = UpstreamError(f"{node.name} unreachable: {exc}")
            except (aiohttp.ClientError, OSError) as exc:
                sent = True
                last = UpstreamError(f"{node.name} failed: {exc}")
            self._failed(node, "timeout" if last.timeout else "error")
            if sent and not idempotent:
                break
            if self.on_result is not None and attempt + 1 < self.cfg.max_attempts:
                self.on_result(node, "retry")
        raise last

    def _ok(self, node: Node) -> None:
        node.consecutive_failures = 0
        if self.on_result is not None:
            self.on_result(node, "ok")

    def _failed(self, node: Node, kind: str) -> None:
        node.failures += 1
        node.consecutive_failures += 1
        if node.consecutive_failures >= self.cfg.fail_threshold:
            node.down_until = time.monotonic() + self.cfg.cooldown_s
            node.healthy = False
            log.warning("node taken out node=%s for_s=%s", node.name, self.cfg.cooldown_s)
        if self.on_result is not None:
            self.on_result(node, kind)

    # -- health --------------------------------------------------------------
    async def probe_once(self) -> None:
        """Ask every node for its head; mark down, lagging or healthy."""
        results = await asyncio.gather(*(self._probe(node) for node in self.nodes))
        heads = [h for h in results if h is not None]
        best = max(heads, default=0)
        now = time.monotonic()
        for node, head in zip(self.nodes, results, strict=True):
            if head is None:
                node.healthy = False
                continue
            node.head = head
            node.lagging = best - head > self.cfg.max_lag_blocks
            if not node.healthy or now >= node.down_until:
                if not node.healthy:
                    log.info("node back node=%s head=%s", node.name, head)
                node.healthy = True
                node.down_until = 0.0
                node.consecutive_failures = 0

    async def _probe(self, node: Node) -> int | None:
        assert self.session is not None
        try:
            async with self.session.post(
                    node.url, data=PROBE_BODY, headers=_JSON_HEADERS,
                    timeout=aiohttp.ClientTimeout(total=min(self.total_timeout_s, 5.0),
                                                  sock_connect=self.connect_timeout_s)) as resp:
                if resp.status != 200:
                    return None
                reply = orjson.loads(await resp.read())
                return int(reply["result"], 16)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError, TypeError,
                orjson.JSONDecodeError):
            return None

    async def probe_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.probe_once()
            await asyncio.sleep(self.cfg.probe_interval_s)


def _dumps(obj: object) -> str:
    return orjson.dumps(obj).decode()
