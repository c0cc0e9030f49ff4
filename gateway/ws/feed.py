"""One network's upstream subscriptions over one node socket at a time.

The ``Feed`` keeps one socket to one node of the network while anyone is
subscribed. When it drops, the feed connects to the next node (healthy ones
first), subscribes again and has each stream repaired (``ws.repair``) before
resuming it. Once the last subscription is gone no new socket is tried. The
shared subscriptions themselves, and their delivery rules, are
``ws.fanout.UpSub``.

It stays whole because the socket's life (connect, fail over, give up a node
that fell behind) and the subscriptions' life (reserve, establish, resume,
release) decide together when a socket is wanted and what rides on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.config import NetworkConfig, WsConfig
from gateway.config.redact import redact_url
from gateway.redis.failurelog import error_fields
from gateway.upstream.pool import NodePool
from gateway.ws.fanout import Counters, NodeRefused, UpSub
from gateway.ws.nodelink import LinkError, NodeLink
from gateway.ws.session import Session

log = logging.getLogger("gateway.ws.fanout")


class NoSocket(TimeoutError):
    """Every WebSocket URL of the network refused a socket (not a slow node)."""


class Feed:
    """One network's upstream subscriptions over one node socket at a time."""

    def __init__(
        self,
        network: NetworkConfig,
        cfg: WsConfig,
        pool: NodePool | None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = network.name
        self.urls = network.ws_upstreams
        self.cfg = cfg
        self.pool = pool
        self.timeout = cfg.upstream_request_timeout_s
        self.subs: dict[tuple[str, bytes], UpSub] = {}
        self.by_uid: dict[str, UpSub] = {}
        self.link: NodeLink | None = None
        # Connection attempts refused in a row; a full round (every URL) means no
        # node takes a socket now, and a subscribe is answered at once instead
        # of holding its caller (and an in-flight slot) for the whole timeout.
        self.refusals = 0
        self._round_refused = asyncio.Event()  # set, and replaced, at each refused round
        # The last round of attempts found no node taking a socket (kept after the
        # subscribers left, for /readyz: gateway.ws.readiness); a socket clears it.
        self.no_socket = False
        self.counters = Counters()
        self.failovers = 0
        self.failovers_seen = 0  # what the metrics have counted so far
        self.filled = 0
        self.on_change = on_change
        self._index = 0
        self._wanted = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- client side ---------------------------------------------------------
    async def reserve(self, kind: str, params: list[Any], canon: bytes) -> UpSub:
        """The live shared subscription for (kind, filter), made if needed.

        The caller holds a reservation (``up.reserved``) until it attaches its
        listener or gives up; raises ``NodeRefused`` or ``TimeoutError``.
        """
        key = (kind, canon)
        up = self.subs.get(key)
        if up is None:
            up = self.subs[key] = UpSub(self, kind, params, canon)
            self.on_change()
            self._wanted.set()
            self.spawn(self._establish(up))
        up.reserved += 1
        try:
            await self._ready(up)
        except LinkError as exc:
            up.reserved -= 1
            raise NodeRefused(exc.error) from None
        except BaseException:
            up.reserved -= 1
            self.release(up, b"", None)
            raise
        return up

    async def _ready(self, up: UpSub) -> None:
        """Wait for ``up`` to be live: at most the timeout, and no longer than it takes
        every node to refuse a socket (then ``TimeoutError`` at once)."""
        if up.ready.done():
            up.ready.result()  # raises the node's refusal
            return
        if self.link is None and self.refusals >= len(self.urls):
            raise NoSocket("no node takes a WebSocket now")
        ready: asyncio.Future[Any] = asyncio.shield(up.ready)
        refused: asyncio.Future[Any] = asyncio.ensure_future(self._round_refused.wait())
        try:
            await asyncio.wait({ready, refused}, timeout=self.timeout, return_when=FIRST_COMPLETED)
            live, every_node_refused = ready.done(), refused.done()
        finally:
            refused.cancel()
            ready.cancel()  # the shield only (a no-op once done): the subscription goes on
        if not live:
            if every_node_refused:
                raise NoSocket("no node takes a WebSocket now")
            raise TimeoutError("no node accepted the subscription")
        ready.result()

    def release(self, up: UpSub, cid: bytes, sess: Session | None) -> None:
        """Detach one client subscription; the last one out unsubscribes upstream."""
        cids = up.listeners.get(sess) if sess is not None else None
        if cids is not None:
            with contextlib.suppress(ValueError):
                cids.remove(cid)
            if not cids:
                del up.listeners[sess]  # type: ignore[arg-type]
        if up.listeners or up.reserved or up.dead:
            return
        up.dead = True
        self._drop(up)
        uid, up.uid = up.uid, None
        if uid is not None:
            self.by_uid.pop(uid, None)
            link = self.link
            if link is not None:
                self.spawn(_quiet_call(link, "eth_unsubscribe", [uid], self.timeout))

    def _drop(self, up: UpSub) -> None:
        """Forget a dead ``up``; with nothing left, stop wanting (and retrying) a node."""
        if self.subs.get((up.kind, up.canon)) is up:
            del self.subs[(up.kind, up.canon)]
        if not self.subs:
            self._wanted.clear()
            self.refusals = 0  # stale by the time anyone subscribes again
        self.on_change()

    # -- node side -----------------------------------------------------------
    def _notify(self, uid: str, raw: bytes, result: Any) -> None:
        up = self.by_uid.get(uid)
        if up is not None:
            up.on_notify(raw, result, uid)

    async def _establish(self, up: UpSub) -> None:
        """Subscribe ``up`` on the current link (waiting for one if needed)."""
        while not up.dead:
            link = self.link
            if link is None:
                await asyncio.sleep(0.05)
                continue
            try:
                await link.call(
                    "eth_subscribe", up.params, self.timeout, bind=lambda r: self._bind(up, r)
                )
            except LinkError as exc:
                if exc.error is not None:  # the node refuses this subscription
                    if not up.ready.done():
                        up.ready.set_exception(exc)
                    up.dead = True
                    self._drop(up)
                    return
                await asyncio.sleep(0.05)
                continue
            if up.dead and up.uid is not None:  # everyone left meanwhile
                self.by_uid.pop(up.uid, None)
                await _quiet_call(link, "eth_unsubscribe", [up.uid], self.timeout)
            # The stream starts at the head of the moment: later heads and logs
            # are owed to the client, and failover fills them from here on.
            with contextlib.suppress(LinkError, TypeError, ValueError):
                head = int(await link.call("eth_blockNumber", [], self.timeout), 16)
                if up.kind == "logs":
                    up.covered = max(up.covered, head)
                elif up.kind == "newHeads":
                    up.last = max(up.last, head)
            if not up.ready.done():
                up.ready.set_result(None)
            return

    def _bind(self, up: UpSub, uid: Any) -> None:
        if type(uid) is str:
            up.uid = uid
            self.by_uid[uid] = up

    async def run(self, http: aiohttp.ClientSession) -> None:
        """Keep a socket to some node while anyone is subscribed; fail over on loss.

        Once the last subscription is gone (``_wanted`` cleared) no new socket is
        tried: a node without a WebSocket is not retried for nobody. A socket
        already open stays until it drops.
        """
        failures = 0
        while True:
            if not self._wanted.is_set():
                failures = 0  # the next subscriber starts a fresh round
                await self._wanted.wait()
            url_index = self._pick()
            url = self.urls[url_index]
            link = NodeLink(f"{self.name}-{url_index}", self._notify)
            try:
                await link.open(http, url, self.cfg.upstream_connect_timeout_s)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                if failures % len(self.urls) == 0:  # once per round of nodes, not per try
                    self._unreachable(link.name, url, exc)
                failures += 1
                self.refusals = failures
                if failures % len(self.urls) == 0:  # every node refused: say so to waiters
                    self.no_socket = True
                    self._round_refused.set()
                    self._round_refused = asyncio.Event()
                self._index = url_index + 1
                # Each full round of refusals doubles the wait (at most 5 s).
                rounds = min(failures // len(self.urls), 4)
                await asyncio.sleep(min(5.0, self.cfg.reconnect_delay_s * 2**rounds))
                continue
            failures = self.refusals = 0
            self.no_socket = False
            self.link = link
            resumed = [up for up in self.subs.values() if up.ready.done() and not up.dead]
            for up in resumed:
                up.filling = True
                self.spawn(self._resume(up, link))
            try:
                await self._watch(link)
            finally:
                self.link = None
                for up in self.subs.values():
                    if up.uid is not None:
                        self.by_uid.pop(up.uid, None)
                        up.uid = None
                await link.close()
            self.failovers += 1
            self._index = url_index + 1
            log.info("ws node lost network=%s node=%s", self.name, link.name)

    def _unreachable(self, node: str, url: str, exc: BaseException) -> None:
        """The failure line of a refused socket: where (redacted URL) and why."""
        cls, message = error_fields(exc, url)
        shown = redact_url(url)
        log.warning(
            "ws node unreachable network=%s node=%s url=%s error=%s: %s",
            self.name,
            node,
            shown,
            cls,
            message,
            extra={
                "network": self.name,
                "node": node,
                "target": shown,
                "error_class": cls,
                "error": message,
            },
        )

    async def _watch(self, link: NodeLink) -> None:
        """Wait until the link closes, or until its node has fallen behind.

        Behind means: the HTTP pool's probes see a head at least two blocks
        past the last head this node sent, for ``ws.head_stall_s`` in a row
        (a halted chain stalls every node alike and moves nothing).
        """
        stall = self.cfg.head_stall_s
        pool = self.pool
        if stall <= 0 or pool is None:
            await link.closed
            return
        behind_since: float | None = None
        step = min(stall / 4, 1.0)
        while not link.closed.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(link.closed), step)
            sent = [up.last for up in self.subs.values() if up.kind == "newHeads" and up.last]
            best = max((node.head for node in pool.nodes), default=0)
            now = time.monotonic()
            if not sent or best < max(sent) + 2:
                behind_since = None
            elif behind_since is None:
                behind_since = now
            elif now - behind_since >= stall:
                log.warning("ws node behind network=%s node=%s", self.name, link.name)
                return

    async def _resume(self, up: UpSub, link: NodeLink) -> None:
        """After a failover: subscribe again, then repair the stream."""
        try:
            await link.call(
                "eth_subscribe", up.params, self.timeout, bind=lambda r: self._bind(up, r)
            )
        except LinkError:
            up.filling = False
            return
        if up.dead and up.uid is not None:  # everyone left while it resubscribed
            self.by_uid.pop(up.uid, None)
            await _quiet_call(link, "eth_unsubscribe", [up.uid], self.timeout)
            return
        await up._repair(link)

    def _pick(self) -> int:
        """The next node to try, healthy ones first (by the HTTP pool's probes)."""
        n = len(self.urls)
        pool = self.pool
        if pool is not None and len(pool.nodes) == n:
            now = pool.clock()
            for i in range(n):
                idx = (self._index + i) % n
                if pool.nodes[idx].usable(now):
                    return idx
        return self._index % n

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.link is not None:
            await self.link.close()


async def _quiet_call(link: NodeLink, method: str, params: list[Any], limit_s: float) -> None:
    with contextlib.suppress(LinkError):
        await link.call(method, params, limit_s)
