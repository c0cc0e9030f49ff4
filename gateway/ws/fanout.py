"""Shared upstream subscriptions for one network, fanned out to client sockets.

One ``UpSub`` per distinct (kind, canonical filter): a thousand sockets on
``newHeads`` are one ``eth_subscribe`` at the node. The sockets sharing it
share one subscription id too, chosen by the gateway when the ``UpSub`` is
made (SPEC §9; never the node's, so it survives a failover): the node's
notification bytes are split once around the node's id and framed once
with the shared id, and the same bytes are written to every socket (the
node's exact shape, nothing re-encoded). A socket that subscribes to the
same feed twice gets its own id for the second one, so each of its
subscriptions can be ended alone.

The ``Feed`` keeps one socket to one node of the network. When it drops,
the feed connects to the next node (healthy ones first), subscribes again
and repairs the streams before resuming them:

* ``newHeads``: numbers only ever go up by one. Missed heads are fetched
  with ``eth_getBlockByNumber`` (at most ``ws.gap_fill_max_blocks``);
  a head at or below the last one sent is a duplicate and dropped.
* ``logs``: the blocks of logs sent recently (``ws.reorg_memory_blocks``)
  are checked against the new node; logs of a block it no longer has are
  sent again with ``removed: true``; logs of missed blocks come from
  ``eth_getLogs``; (blockHash, logIndex) already sent are never repeated.

Notifications that arrive while a stream is being repaired wait in a
backlog and go through the same rules afterwards.

It stays whole because ``UpSub`` and ``Feed`` are two halves of one state
machine: a feed's failover re-subscribes each UpSub and drives its repair (its
``filling`` flag, ``_repair``), and an UpSub reaches back to its feed for the
node socket and its release.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from asyncio import FIRST_COMPLETED
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from gateway.config import NetworkConfig, WsConfig
from gateway.config.redact import redact_url
from gateway.redis.failurelog import error_fields
from gateway.upstream.pool import NodePool
from gateway.ws.nodelink import LinkError, NodeLink
from gateway.ws.session import Session, frame_header

log = logging.getLogger("gateway.ws.fanout")

_NOTE_HEAD = b'{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":'
_CID_LEN = 36  # b'"0x' + 32 hex digits + b'"': every client subscription id
_BLOCK_ONLY = ("transactions", "uncles", "size", "totalDifficulty", "withdrawals")


class NodeRefused(Exception):
    """The node answered ``eth_subscribe`` with an error (e.g. a kind it lacks)."""

    def __init__(self, error: Any) -> None:
        super().__init__("node refused the subscription")
        self.error = error


class Counters:
    """Plain ints bumped on the fan-out path; flushed into Prometheus periodically."""

    __slots__ = ("dropped_budget", "dropped_slow", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.dropped_budget = 0
        self.dropped_slow = 0


class UpSub:
    """One upstream subscription and the client subscriptions sharing it."""

    __slots__ = (
        "backlog",
        "canon",
        "cid",
        "covered",
        "dead",
        "feed",
        "filling",
        "kind",
        "last",
        "listeners",
        "params",
        "ready",
        "recent",
        "reserved",
        "uid",
    )

    def __init__(self, feed: Feed, kind: str, params: list[Any], canon: bytes) -> None:
        self.feed = feed
        self.kind = kind
        self.canon = canon
        self.reserved = 0  # clients whose subscribe answer is on its way
        self.params = params  # what the node is sent: [kind, filter?]
        self.cid = new_client_id()  # the id every socket sharing this feed is given
        # socket -> its client ids on this feed (normally just ``cid``)
        self.listeners: dict[Session, list[bytes]] = {}
        self.uid: str | None = None  # the node's id for it, while subscribed
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(_retrieved)  # a refusal nobody waited for is not an error
        self.dead = False
        self.last = 0  # newHeads: last number sent
        self.covered = 0  # logs: blocks up to here were watched
        self.recent: OrderedDict[int, tuple[str, dict[str, dict[str, Any]]]] = OrderedDict()
        self.filling = False
        self.backlog: list[tuple[bytes, Any, str]] = []

    # -- delivery ------------------------------------------------------------
    def fan(self, head: bytes, tail: bytes) -> None:
        """Give every listener ``head + its id + tail`` (or drop and count).

        The frame with the shared id is built once and the same bytes go to
        every socket; only a socket's second subscription to this feed (its
        own id) costs a concatenation. Client ids all have one length.
        """
        if not self.listeners:
            return
        counters = self.feed.counters
        now = time.monotonic()
        prefix = frame_header(len(head) + _CID_LEN + len(tail)) + head
        shared_cid = self.cid
        shared = prefix + shared_cid + tail
        for sess, cids in self.listeners.items():
            key = sess.key
            if key.throttled_until > now:
                counters.dropped_budget += len(cids)
                continue
            for cid in cids:
                if sess.push_framed(shared if cid == shared_cid else prefix + cid + tail):
                    key.pending += 1
                    counters.sent += 1
                else:
                    counters.dropped_slow += 1

    def fan_raw(self, raw: bytes, uid: str) -> None:
        quoted = b'"' + uid.encode() + b'"'
        at = raw.find(quoted)
        if at < 0:
            return
        self.fan(raw[:at], raw[at + len(quoted) :])

    def fan_result(self, result: Any) -> None:
        """A notification the gateway makes itself (gap fill, removed logs)."""
        self.fan(_NOTE_HEAD, b',"result":' + orjson.dumps(result) + b"}}")

    def on_notify(self, raw: bytes, result: Any, uid: str) -> None:
        if self.filling:
            self.backlog.append((raw, result, uid))
            return
        if self.kind == "newHeads":
            self._head(raw, result, uid)
        elif self.kind == "logs":
            self._log(raw, result, uid)
        else:
            self.fan_raw(raw, uid)

    def _head(self, raw: bytes, result: Any, uid: str) -> None:
        try:
            number = int(result["number"], 16)
        except (TypeError, KeyError, ValueError):
            return
        last = self.last
        if last and number <= last:
            return  # duplicate, or a step back: never sent (SPEC §9)
        if last and number > last + 1:
            link = self.feed.link
            if link is not None:
                self.filling = True
                self.backlog.append((raw, result, uid))
                self.feed.spawn(self._repair(link))
                return
        self.last = number
        self.fan_raw(raw, uid)

    def _log(self, raw: bytes, result: Any, uid: str) -> None:
        try:
            number = int(result["blockNumber"], 16)
            bhash = str(result["blockHash"])
            index = str(result["logIndex"])
        except (TypeError, KeyError, ValueError):
            self.fan_raw(raw, uid)
            return
        if result.get("removed") is True:
            entry = self.recent.get(number)
            if entry is not None and entry[0] == bhash:
                entry[1].pop(index, None)
            self.fan_raw(raw, uid)
            return
        if not self._remember(number, bhash, index, result):
            return  # already sent
        self.fan_raw(raw, uid)

    def _remember(self, number: int, bhash: str, index: str, result: Any) -> bool:
        """Record a log as sent; False if this (block, index) was sent already."""
        entry = self.recent.get(number)
        if entry is None or entry[0] != bhash:
            entry = (bhash, {})
            self.recent[number] = entry
            self.recent.move_to_end(number)
            while len(self.recent) > self.feed.cfg.reorg_memory_blocks:
                self.recent.popitem(last=False)
        if index in entry[1]:
            return False
        entry[1][index] = result
        if number > self.covered:
            self.covered = number
        return True

    # -- repair after a gap or a failover -------------------------------------
    async def _repair(self, link: NodeLink) -> None:
        """Fill what was missed from ``link``, then replay the backlog."""
        self.filling = True
        try:
            head = int(await link.call("eth_blockNumber", [], self.feed.timeout), 16)
            if self.kind == "newHeads" and self.last:
                await self._fill_heads(link, head)
            elif self.kind == "logs":
                await self._fill_logs(link, head)
        except (LinkError, TypeError, ValueError) as exc:
            log.info(
                "ws repair incomplete network=%s kind=%s err=%s", self.feed.name, self.kind, exc
            )
        finally:
            self.filling = False
            backlog, self.backlog = self.backlog, []
            for raw, result, uid in backlog:
                if self.filling:  # a new gap started a new repair
                    self.backlog.append((raw, result, uid))
                else:
                    self.on_notify(raw, result, uid)

    async def _fill_heads(self, link: NodeLink, head: int) -> None:
        target = min(head, self.last + self.feed.cfg.gap_fill_max_blocks)
        if self.backlog:
            with contextlib.suppress(TypeError, KeyError, ValueError):
                first = int(self.backlog[0][1]["number"], 16)
                target = min(target, first - 1) if first > self.last else target
        while self.last < target and not self.dead:
            block = await link.call(
                "eth_getBlockByNumber", [hex(self.last + 1), False], self.feed.timeout
            )
            if type(block) is not dict:
                break
            header = {k: v for k, v in block.items() if k not in _BLOCK_ONLY}
            self.last += 1
            self.feed.filled += 1
            self.fan_result(header)
        if self.last < head - self.feed.cfg.gap_fill_max_blocks:
            log.warning("ws gap over limit network=%s skipped_to=%s", self.feed.name, head)

    async def _fill_logs(self, link: NodeLink, head: int) -> None:
        timeout = self.feed.timeout
        reorged: list[int] = []
        for number in list(self.recent):
            if number > head:
                continue
            bhash, logs = self.recent[number]
            block = await link.call("eth_getBlockByNumber", [hex(number), False], timeout)
            if type(block) is dict and block.get("hash") == bhash:
                continue
            reorged.append(number)
            del self.recent[number]
            for old in logs.values():
                self.fan_result({**old, "removed": True})
        start = self.covered + 1 if self.covered else head + 1
        if reorged:  # the new chain's logs of those blocks are sent as well
            start = min(start, *reorged)
        start = max(start, head - self.feed.cfg.gap_fill_max_blocks + 1)
        if start > head:
            self.covered = max(self.covered, head)
            return
        flt = dict(self.params[1]) if len(self.params) > 1 else {}
        flt.update(fromBlock=hex(start), toBlock=hex(head))
        found = await link.call("eth_getLogs", [flt], timeout)
        for item in found if type(found) is list else []:
            try:
                number = int(item["blockNumber"], 16)
                ok = self._remember(number, str(item["blockHash"]), str(item["logIndex"]), item)
            except (TypeError, KeyError, ValueError):
                continue
            if ok:
                self.feed.filled += 1
                self.fan_result(item)
        self.covered = max(self.covered, head)


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
            raise TimeoutError("no node takes a WebSocket now")
        ready: asyncio.Future[Any] = asyncio.shield(up.ready)
        refused: asyncio.Future[Any] = asyncio.ensure_future(self._round_refused.wait())
        try:
            await asyncio.wait({ready, refused}, timeout=self.timeout, return_when=FIRST_COMPLETED)
            live = ready.done()
        finally:
            refused.cancel()
            ready.cancel()  # the shield only (a no-op once done): the subscription goes on
        if not live:
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
                    self._round_refused.set()
                    self._round_refused = asyncio.Event()
                self._index = url_index + 1
                # Each full round of refusals doubles the wait (at most 5 s).
                rounds = min(failures // len(self.urls), 4)
                await asyncio.sleep(min(5.0, self.cfg.reconnect_delay_s * 2**rounds))
                continue
            failures = self.refusals = 0
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


def new_client_id() -> bytes:
    """A client subscription id, quoted: 128 random bits in hex, like geth's."""
    return b'"0x' + secrets.token_hex(16).encode() + b'"'


def _retrieved(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()


async def _quiet_call(link: NodeLink, method: str, params: list[Any], limit_s: float) -> None:
    with contextlib.suppress(LinkError):
        await link.call(method, params, limit_s)
