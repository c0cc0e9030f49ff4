"""The network head from the chain itself: one ``newHeads`` subscription per node.

Polling every ``probe_interval_s`` leaves ``latest`` up to that far behind
(a BSC block is 0.75 s, opBNB's a fraction of that). So each node with a
WebSocket URL (``ws_upstreams``, by default its HTTP URL with the ws
scheme) gets one socket that subscribes to ``newHeads``; every header is a
claim the pool confirms at once over the node's HTTP (``upstream.headcheck``)
before it moves that node's head, and with it the network head (which drops
the head-dependent cache entries).

The probe keeps running beside it: it is what verifies the node (chain id),
marks it in or out of service, and reads ``safe``/``finalized``; only the
heads of a node in service are taken. A lost socket is opened again after
``ws_reconnect_min_s``, doubled per failure in a row up to
``ws_reconnect_max_s``; each loss asks for a probe at once (a node whose
socket closed may be down, and the network must stop answering from
memory within seconds, not a probe interval). Failure lines are
rate-limited per node and name its redacted URL; the next subscription
that works says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final

import aiohttp
import orjson

from gateway.config import NetworkConfig, UpstreamConfig, ws_url_for
from gateway.config.redact import redact_url
from gateway.intel.head import HeadReport, block_mark
from gateway.redis.failurelog import RateLimitedLog, error_fields
from gateway.upstream.node import Node

log = logging.getLogger("gateway.upstream")

# The socket's own chain id first (id 0), then the subscription (id 1): the WS
# URL is configured apart from the HTTP one the probe verifies, so a socket on
# another chain must never move this network's head.
_HELLO: Final = (
    '{"jsonrpc":"2.0","id":0,"method":"eth_chainId","params":[]}',
    '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}',
)
_MAX_FRAME: Final = 1 << 20  # a header is ~1 KB; a node sending more is not one to trust


def ws_urls(network: NetworkConfig) -> list[str]:
    """Each node's newHeads URL ("" = none): by position when the lists match, else by address.

    A ``ws_upstreams`` entry that pairs with no HTTP upstream moves no head
    (a head must come from a node the probe verifies).
    """
    http, ws = network.upstreams, network.ws_upstreams
    if len(ws) == len(http):
        return list(ws)
    derived = {ws_url_for(url): url for url in http if url.startswith("http")}
    by_http = {derived[url]: url for url in ws if url in derived}
    return [by_http.get(url, "") for url in http]


class SubscriptionRefused(Exception):
    """The node answered ``eth_subscribe`` with an error (or not at all), or its socket
    is on another chain."""


def header_report(frame: Any) -> HeadReport | None:
    """A ``newHeads`` notification as a head report (a claim); None for anything else.

    Read as the probe reads a block (``intel.head.block_mark``), with a
    stricter number: ``0x`` and at most 16 hex digits, as a header carries it.
    """
    if type(frame) is not dict or frame.get("method") != "eth_subscription":
        return None
    params = frame.get("params")
    header = params.get("result") if type(params) is dict else None
    number = header.get("number") if type(header) is dict else None
    if type(number) is not str or number[:2] not in ("0x", "0X") or len(number) > 18:
        return None
    mark = block_mark(header)
    return None if mark is None else HeadReport(mark[0], mark[1])


@dataclass(eq=False)
class HeadFollower:
    """Keeps one node's ``newHeads`` subscription open and feeds what it says."""

    network: str
    node: Node
    session: aiohttp.ClientSession
    cfg: UpstreamConfig
    _: KW_ONLY
    chain_id: int
    on_head: Callable[[Node, HeadReport], None]
    on_lost: Callable[[Node], None]
    lines: RateLimitedLog
    connect_timeout_s: float
    shown: str = field(init=False)  # for logs: the key-free form
    live: bool = field(init=False, default=False)  # subscribed right now
    no_ws: bool = field(init=False, default=False)  # the URL refused the handshake (said once)
    heads: int = field(init=False, default=0)  # headers taken (tests and the bench read it)

    def __post_init__(self) -> None:
        self.shown = redact_url(self.node.ws_url)

    async def run(self) -> None:
        """Subscribe, follow, and on any loss wait and subscribe again, until cancelled."""
        delay = self.cfg.ws_reconnect_min_s
        task = asyncio.current_task()
        while task is None or not task.cancelling():
            try:
                await self._follow()
                reason: tuple[str, str] = ("Closed", "the node closed the socket")
            except aiohttp.WSServerHandshakeError as exc:
                reason = error_fields(exc, self.node.ws_url)
                if 400 <= exc.status < 500:  # no WebSocket here (most public RPC URLs)
                    self._no_websocket(reason)
                    await asyncio.sleep(self.cfg.ws_reconnect_max_s * random.uniform(0.8, 1.2))
                    continue
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                reason = error_fields(exc, self.node.ws_url)
            except SubscriptionRefused as exc:
                reason = ("SubscriptionRefused", str(exc))
            if self.live:  # it worked for a while: start over, and have the node probed now
                delay = self.cfg.ws_reconnect_min_s
                self.on_lost(self.node)
            self._set_live(False)
            self._failed(reason, delay)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.cfg.ws_reconnect_max_s)

    async def _follow(self) -> None:
        node = self.node
        async with asyncio.timeout(self.connect_timeout_s + self.cfg.probe_timeout_s):
            ws = await self.session.ws_connect(
                node.ws_url,
                heartbeat=max(5.0, 5 * self.cfg.probe_interval_s),
                max_msg_size=_MAX_FRAME,
                autoclose=True,
            )
        try:
            async with asyncio.timeout(self.cfg.probe_timeout_s):
                for request in _HELLO:
                    await ws.send_str(request)
                answers: dict[int, Any] = {}
                while len(answers) < len(_HELLO):  # a header may come before the answers
                    msg = await ws.receive()
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        raise SubscriptionRefused(f"socket ended before the answer ({msg.type})")
                    frame = orjson.loads(msg.data)
                    if type(frame) is dict and frame.get("id") in (0, 1):
                        answers[frame["id"]] = frame
            chain = answers[0].get("result")
            if chain != hex(self.chain_id):
                raise SubscriptionRefused(
                    f"the socket's eth_chainId is {str(chain)[:40]}, expected {hex(self.chain_id)}"
                )
            frame = answers[1]
            if type(frame.get("result")) is not str:
                raise SubscriptionRefused(f"eth_subscribe answered {str(frame.get('error'))[:200]}")
            self._set_live(True)
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    break
                report = header_report(orjson.loads(msg.data))
                if report is not None and 0 <= report.number < 1 << 63:
                    self.heads += 1
                    self.on_head(node, report)
        finally:
            await ws.close()

    def _set_live(self, live: bool) -> None:
        node = self.node
        if live:
            self.no_ws = False
        if live and not self.live:
            key = (node.name, "newHeads")
            if self.lines.recovered(key) or not self.heads:
                log.info(
                    "upstream newHeads subscribed network=%s node=%s url=%s",
                    self.network,
                    node.name,
                    self.shown,
                    extra={"network": self.network, "node": node.name, "target": self.shown},
                )
        self.live = node.newheads = live
        if node.metrics is not None:
            node.metrics.ws_heads.set(1 if live else 0)

    def _no_websocket(self, reason: tuple[str, str]) -> None:
        """Say once that this URL has no WebSocket; retried at the longest interval, quietly."""
        self._set_live(False)
        if self.no_ws:
            return
        self.no_ws = True
        node = self.node
        log.info(
            "upstream has no newHeads socket network=%s node=%s url=%s error=%s: %s "
            "(the head is polled; set ws_upstreams to a WebSocket URL for a fresher head)",
            self.network,
            node.name,
            self.shown,
            reason[0],
            reason[1],
            extra=self._fields(reason),
        )

    def _fields(self, reason: tuple[str, str]) -> dict[str, str]:
        """A failure line's fields for ``log.format = "json"``."""
        return {
            "network": self.network,
            "node": self.node.name,
            "target": self.shown,
            "error_class": reason[0],
            "error": reason[1],
        }

    def _failed(self, reason: tuple[str, str], delay: float) -> None:
        suppressed = self.lines.failed((self.node.name, "newHeads"))
        if suppressed is None:
            return
        node = self.node
        log.warning(
            "upstream newHeads failed network=%s node=%s url=%s error=%s: %s "
            "retry_in_s=%.1f suppressed=%d (the probe keeps the head meanwhile)",
            self.network,
            node.name,
            self.shown,
            reason[0],
            reason[1],
            delay,
            suppressed,
            extra=self._fields(reason),
        )


class HeadFeeds:
    """The followers of one network's nodes, as background tasks until ``close``."""

    def __init__(self) -> None:
        self.followers: list[HeadFollower] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, followers: list[HeadFollower]) -> None:
        for follower in followers:
            self.followers.append(follower)
            name = f"newheads-{follower.node.name}"
            self._tasks.append(asyncio.create_task(follower.run(), name=name))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
