"""One client socket and one API key's sockets in this process.

``Session.push`` never waits: fan-out hands every socket its frame in one
synchronous loop, written straight to each connection's transport. A client that
stops reading lets its queue grow; once ``ws.send_queue_bytes`` would be
passed the connection is aborted (not closed politely: a close frame would
wait behind the queue), so a slow client holds a bounded amount of memory
and never slows anyone else down.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any, Protocol

from aiohttp import web

from gateway.config import PlanConfig


class _Feed(Protocol):
    def release(self, up: Any, cid: bytes, sess: Any) -> None: ...


class Subscription(Protocol):
    """What a session holds per client subscription (``fanout.UpSub``).

    A protocol, not an import: fanout imports session, so session importing
    fanout back would be a cycle.
    """

    @property
    def kind(self) -> str: ...

    @property
    def feed(self) -> _Feed: ...

    @property
    def canon(self) -> bytes: ...


log = logging.getLogger("gateway.ws")

CLOSE_REVOKED = 4001  # revoked or expired key
CLOSE_GOING_AWAY = 1001


class KeyState:
    """What this process knows about one API key with sockets open.

    ``pending`` counts notifications delivered but not yet charged; the
    charger turns it into one admission call per key per interval.
    ``throttled_until`` (loop time) is set when that call is refused: until
    then the key's notifications are dropped and counted, not delivered.
    """

    __slots__ = (
        "expiry",
        "key_id",
        "khash",
        "pending",
        "plan",
        "reserving",
        "sessions",
        "throttled_until",
    )

    def __init__(self, khash: str, key_id: str, plan: PlanConfig):
        self.khash = khash
        self.key_id = key_id
        self.plan = plan
        self.sessions: set[Session] = set()
        self.pending = 0
        self.throttled_until = 0.0
        self.expiry: asyncio.TimerHandle | None = None
        # (network, kind, filter) -> subscribe calls of this key awaiting the node
        self.reserving: dict[tuple[str, str, bytes], int] = {}

    def upstream_count(self, extra: tuple[str, str, bytes]) -> int:
        """Distinct upstream subscriptions this key holds or awaits, counting ``extra``."""
        held = {(s.network, up.kind, up.canon) for s in self.sessions for up in s.subs.values()}
        held.update(self.reserving)
        held.add(extra)
        return len(held)


def frame_header(size: int, first: int = 0x81) -> bytes:
    """RFC 6455 header of one unmasked frame of ``size`` bytes.

    ``first`` is the FIN bit and opcode: 0x81 a whole text message; 0x01 the
    first piece of a fragmented one, 0x00 a middle piece, 0x80 the last.
    """
    if size < 126:
        return bytes((first, size))
    if size < 65536:
        return struct.pack("!BBH", first, 126, size)
    return struct.pack("!BBQ", first, 127, size)


_DRAIN_POLL_S = 0.005  # the transport has no "drained" event to wait on: poll it


class Session:
    """One client's socket: its subscriptions, in-flight calls, and its send path.

    Frames are written straight to the connection's transport (one
    ``write`` per frame, so they never interleave with the frames aiohttp
    writes: pings, close). The transport's buffer *is* the send queue, so
    its size is the bound: no task per socket, no copy per queued frame.
    """

    __slots__ = (
        "closing",
        "drain_timeout_s",
        "held",
        "held_bytes",
        "key",
        "lease",
        "missed",
        "network",
        "pending_cids",
        "queue_limit",
        "reserved",
        "stream_lock",
        "streaming",
        "subs",
        "tasks",
        "transport",
        "ws",
    )

    def __init__(
        self,
        ws: web.WebSocketResponse,
        key: KeyState,
        network: str,
        transport: asyncio.BaseTransport | None,
        queue_limit: int,
        lease: str = "",
        drain_timeout_s: float = 30.0,
    ) -> None:
        self.ws = ws
        self.key = key
        self.lease = lease  # this socket's token in the key's Redis socket set
        self.network = network
        # uvloop's transports do not subclass asyncio.WriteTransport; duck-type.
        self.transport: Any = transport if hasattr(transport, "get_write_buffer_size") else None
        self.queue_limit = queue_limit
        self.subs: dict[str, Subscription] = {}  # client subscription id -> shared upstream one
        self.tasks: set[asyncio.Task[Any]] = set()
        self.closing: str | None = None  # the disconnect reason once decided
        self.reserved = 0  # subscribe calls awaiting the node: they count towards the cap
        self.pending_cids: set[bytes] = set()  # ids answered, listeners not yet attached
        # A large answer goes out as one fragmented message; other frames wait
        # (``held``) so none lands between its pieces (RFC 6455 §5.4).
        self.stream_lock = asyncio.Lock()
        self.streaming = False
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.drain_timeout_s = drain_timeout_s
        # Notifications dropped over the key's budget and not told yet: the
        # next call answers -32005 saying so (gateway.ws.charging.dropped_signal).
        self.missed = 0

    @property
    def queued(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        t = self.transport
        return t.get_write_buffer_size() if t is not None and not t.is_closing() else 0

    def push(self, payload: bytes) -> bool:
        """Send one text frame; False (and the socket aborted) past the bound."""
        return self.push_framed(frame_header(len(payload)) + payload)

    def push_framed(self, data: bytes) -> bool:
        """Send bytes that already hold complete frames (fan-out builds them once)."""
        t = self.transport
        if self.closing is not None or t is None or t.is_closing():
            return False
        if self.streaming:
            self.held.append(data)
            self.held_bytes += len(data)
            if self.held_bytes > self.queue_limit:
                self.abort("slow")
                return False
            return True
        # Judged on what is still waiting, not on this frame: one answer larger
        # than the bound (a big eth_getLogs) is fine; a client that leaves
        # the bound's worth unread is not.
        if t.get_write_buffer_size() > self.queue_limit:
            self.abort("slow")
            return False
        t.write(data)
        return True

    async def write_piece(self, data: bytes, first: int) -> bool:
        """One piece of a fragmented message, then wait until the client took most of it.

        Memory stays bounded by the send queue whatever the answer's size: the
        next piece is read from the node only once this one drained below
        the bound. A client that does not take it within the drain timeout
        is dropped (False).
        """
        t = self.transport
        if self.closing is not None or t is None or t.is_closing():
            return False
        t.write(frame_header(len(data), first) + data)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout_s
        while not t.is_closing() and t.get_write_buffer_size() > self.queue_limit // 2:
            if loop.time() > deadline:
                self.abort("slow")
                return False
            await asyncio.sleep(_DRAIN_POLL_S)
        return not t.is_closing()

    def begin_stream(self) -> None:
        self.streaming = True

    def end_stream(self) -> None:
        """The fragmented message is complete: the frames that waited go out now."""
        self.streaming = False
        held, self.held, self.held_bytes = self.held, [], 0
        for data in held:
            if not self.push_framed(data):
                break

    def abort(self, reason: str) -> None:
        """Drop the connection now, without a close handshake (its buffer is freed)."""
        if self.closing is None:
            self.closing = reason
        if self.transport is not None:
            self.transport.abort()

    async def close(self, code: int, reason: str, why: str) -> None:
        """A polite close frame (revocation, shutdown); aborts if that fails."""
        if self.closing is None:
            self.closing = why
        try:
            await self.ws.close(code=code, message=reason.encode())
        except Exception:  # the peer may be gone already
            self.abort(why)

    async def finish(self) -> None:
        """Cancel calls still running (the socket is closed)."""
        for task in list(self.tasks):
            task.cancel()
