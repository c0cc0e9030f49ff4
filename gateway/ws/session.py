"""One client socket and one API key's sockets in this process.

``Session.push`` never waits: fan-out hands every socket its frame in one
synchronous loop, and each socket's own writer task sends them. A client that
stops reading lets its queue grow; once ``ws.send_queue_bytes`` would be
passed the connection is aborted (not closed politely: a close frame would
wait behind the queue), so a slow client holds a bounded amount of memory
and never slows anyone else down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from gateway.config import PlanConfig

if TYPE_CHECKING:
    from gateway.ws.fanout import UpSub

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


class Session:
    """One client's socket: its subscriptions, send queue and in-flight calls."""

    __slots__ = (
        "closing",
        "key",
        "network",
        "queue",
        "queue_limit",
        "queued",
        "subs",
        "tasks",
        "transport",
        "wake",
        "writer",
        "ws",
    )

    def __init__(
        self,
        ws: web.WebSocketResponse,
        key: KeyState,
        network: str,
        transport: asyncio.BaseTransport | None,
        queue_limit: int,
    ) -> None:
        self.ws = ws
        self.key = key
        self.network = network
        self.transport = transport
        self.queue_limit = queue_limit
        self.queue: deque[bytes] = deque()
        self.queued = 0
        self.wake = asyncio.Event()
        self.subs: dict[str, UpSub] = {}  # client subscription id -> shared upstream one
        self.tasks: set[asyncio.Task[Any]] = set()
        self.closing: str | None = None  # the disconnect reason once decided
        self.writer: asyncio.Task[None] = asyncio.create_task(self._write())

    def push(self, frame: bytes) -> bool:
        """Queue one text frame; False (and the socket aborted) past the bound."""
        if self.closing is not None:
            return False
        size = len(frame)
        if self.queued + size > self.queue_limit:
            self.abort("slow")
            return False
        self.queue.append(frame)
        self.queued += size
        if len(self.queue) == 1:
            self.wake.set()
        return True

    async def _write(self) -> None:
        queue = self.queue
        send = self.ws.send_frame
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                while queue:
                    frame = queue.popleft()
                    self.queued -= len(frame)
                    await send(frame, WSMsgType.TEXT)
        except (ConnectionError, RuntimeError):  # socket gone under us
            self.abort("error")

    def abort(self, reason: str) -> None:
        """Drop the connection now, without a close handshake."""
        if self.closing is None:
            self.closing = reason
        self.queue.clear()
        self.queued = 0
        if self.transport is not None:
            self.transport.abort()  # type: ignore[attr-defined]

    async def close(self, code: int, reason: str, why: str) -> None:
        """A polite close frame (revocation, shutdown); aborts if that fails."""
        if self.closing is None:
            self.closing = why
        try:
            await self.ws.close(code=code, message=reason.encode())
        except Exception:  # the peer may be gone already
            self.abort(why)

    async def finish(self) -> None:
        """Stop the writer (the socket is closed)."""
        self.writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.writer
        for task in list(self.tasks):
            task.cancel()
