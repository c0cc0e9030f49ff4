"""Shared upstream subscriptions for one network, fanned out to client sockets.

One ``UpSub`` per distinct (kind, canonical filter): a thousand sockets on
``newHeads`` are one ``eth_subscribe`` at the node. The sockets sharing it
share one subscription id too, chosen by the gateway when the ``UpSub`` is
made (never the node's, so it survives a failover): the node's
notification bytes are split once around the node's id and framed once
with the shared id, and the same bytes are written to every socket (the
node's exact shape, nothing re-encoded). A socket that subscribes to the
same feed twice gets its own id for the second one, so each of its
subscriptions can be ended alone.

Delivery rules: a ``newHeads`` number at or below the last one sent is a
duplicate and dropped, and a jump starts a repair (``ws.repair``); a log's
(blockHash, logIndex) already sent is never repeated. The node socket, the
failover and the subscriptions' lifecycle are ``ws.feed.Feed``'s; an
``UpSub`` sees its feed through ``FeedView`` only.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from typing import Any, Protocol

import orjson

from gateway.ws.nodelink import NodeLink
from gateway.ws.repair import RepairFeed, StreamRepair
from gateway.ws.session import Session, frame_header

_NOTE_HEAD = b'{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":'
_CID_LEN = 36  # b'"0x' + 32 hex digits + b'"': every client subscription id


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


class FeedView(RepairFeed, Protocol):
    """What an ``UpSub`` uses of its feed (``ws.feed.Feed``)."""

    counters: Counters
    link: NodeLink | None

    def spawn(self, coro: Any) -> None: ...

    def release(self, up: UpSub, cid: bytes, sess: Session | None) -> None: ...


class UpSub(StreamRepair):
    """One upstream subscription and the client subscriptions sharing it."""

    __slots__ = (
        "canon",
        "cid",
        "dead",
        "feed",
        "kind",
        "listeners",
        "params",
        "ready",
        "reserved",
        "uid",
    )

    feed: FeedView

    def __init__(self, feed: FeedView, kind: str, params: list[Any], canon: bytes) -> None:
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
                sess.missed += len(cids)  # told on its next call (ws.charging)
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
            return  # duplicate, or a step back: never sent
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


def new_client_id() -> bytes:
    """A client subscription id, quoted: 128 random bits in hex, like geth's."""
    return b'"0x' + secrets.token_hex(16).encode() + b'"'


def _retrieved(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
