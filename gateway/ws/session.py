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
    def release(self, up: Any, cid: bytes) -> None: ...


class Subscription(Protocol):
    """What a session holds per client subscription (``fanout.UpSub``).

    A protocol, not an import: fanout imports session, so session importing
    fanout back would be a cycle.
    """

    @property
    def kind(self) -> str: ...

    @property
    def feed(self) -> _Feed: ...


log = logging.getLogger("gateway.ws")

CLOSE_REVOKED = 4001  # SPEC §9: revoked or expired key
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
        "ip_bits",
        "key_id",
        "khash",
        "origin",
        "pending",
        "plan",
        "sessions",
        "throttled_until",
    )

    def __init__(self, khash: str, key_id: str, plan: PlanConfig, origin: str, ip_bits: str):
        self.khash = khash
        self.key_id = key_id
        self.plan = plan
        self.origin = origin
        self.ip_bits = ip_bits
        self.sessions: set[Session] = set()
        self.pending = 0
        self.throttled_until = 0.0
        self.expiry: asyncio.TimerHandle | None = None


def frame_header(size: int) -> bytes:
    """RFC 6455 header of one unmasked, final text frame of ``size`` bytes."""
    if size < 126:
        return bytes((0x81, size))
    if size < 65536:
        return struct.pack("!BBH", 0x81, 126, size)
    return struct.pack("!BBQ", 0x81, 127, size)


class Session:
    """One client's socket: its subscriptions, in-flight calls, and its send path.

    Frames are written straight to the connection's transport (one
    ``write`` per frame, so they never interleave with the frames aiohttp
    writes: pings, close). The transport's buffer *is* the send queue, so
    its size is the bound: no task per socket, no copy per queued frame.
    """

    __slots__ = (
        "closing",
        "key",
        "lease",
        "network",
        "queue_limit",
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
        # Judged on what is still waiting, not on this frame: one answer larger
        # than the bound (a big eth_getLogs) is fine; a client that leaves
        # the bound's worth unread is not.
        if t.get_write_buffer_size() > self.queue_limit:
            self.abort("slow")
            return False
        t.write(data)
        return True

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
