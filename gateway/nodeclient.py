"""A lean keep-alive HTTP/1.1 client for one node, built on aiohttp's own parser.

Why not ``aiohttp.ClientSession`` on the hot path: the session hop (request
object, payload registry, header merging, cookie and trace hooks, timeout
context, response object) was 37 % of all samples in a py-spy profile of
the gateway, for a job that is "write these bytes, read that answer". This
client keeps what the forwarding hop needs and nothing else:

* a pool of keep-alive connections per node (``max_connections``; callers
  beyond it wait for a free connection, in order);
* the request head is precomputed; one ``write`` per call;
* responses are parsed by aiohttp's C ``HttpResponseParser`` (llhttp), so
  Content-Length, chunked and read-until-close bodies and flow control are
  handled by the same code aiohttp's client uses;
* a per-call deadline (one timer) that aborts the connection on expiry.

Errors say whether the request may have reached the node (``sent``), which
is what the retry rules for non-idempotent calls need.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import functools
import ssl
from typing import Any
from urllib.parse import unquote, urlsplit

from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpResponseParser

_MAX_RESPONSE = 2**26  # parser buffer limit; larger bodies are streamed through it


class NodeRequestError(Exception):
    """A call failed; ``sent`` tells whether the node may have received it."""

    def __init__(self, message: str, *, sent: bool, timeout: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.timeout = timeout


class _Conn(BaseProtocol):
    """One connection; at most one request in flight (no pipelining)."""

    def __init__(self, client: NodeClient, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._client = client
        parser = HttpResponseParser(
            self, loop, _MAX_RESPONSE, read_until_eof=True, auto_decompress=False
        )
        self._http = parser
        self._parser = parser  # BaseProtocol pauses/resumes this one under flow control
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._payload: Any = None
        self._status = 0
        self._keep = True
        self._body: list[bytes] = []
        self._draining = False
        self.closed = False
        self.idle_since = 0.0

    # -- asyncio.Protocol --------------------------------------------------------
    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._payload is not None:
            # a body delimited by the connection's end is complete now
            with contextlib.suppress(HttpProcessingError):
                self._http.feed_eof()
            if self._payload.is_eof():
                self._drain()
                return
        self._fail(
            NodeRequestError(f"connection lost: {exc!r}" if exc else "connection closed", sent=True)
        )
        self._client._discard(self)

    def data_received(self, data: bytes) -> None:
        if not data:
            # BaseProtocol.resume_reading() re-enters here with b"" to resume a
            # paused parser; while we are draining, the drain loop handles it.
            if self._draining or self._waiter is None:
                return
        elif self._waiter is None:  # nothing asked: the node broke protocol; drop it
            self._abort()
            return
        try:
            messages, _, _ = self._http.feed_data(data)
        except HttpProcessingError as exc:
            self._fail(NodeRequestError(f"bad HTTP from node: {exc}", sent=True))
            self._abort()
            return
        for message, payload in messages:
            self._status = message.code
            self._keep = not message.should_close
            self._payload = payload
        if self._payload is not None:
            self._drain()

    # -- internals -----------------------------------------------------------------
    def _drain(self) -> None:
        payload = self._payload
        self._draining = True
        try:
            chunk = payload.read_nowait(-1)
        finally:
            self._draining = False
        if chunk:
            self._body.append(chunk)
        if not payload.is_eof():
            return
        waiter, self._waiter, self._payload = self._waiter, None, None
        body, self._body = b"".join(self._body), []
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, body))
        if self._keep and not self.closed:
            self._client._release(self)
        else:
            self._abort()

    def _fail(self, exc: NodeRequestError) -> None:
        waiter, self._waiter, self._payload = self._waiter, None, None
        self._body = []
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._client._discard(self)

    def request(self, data: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None
        waiter: asyncio.Future[tuple[int, bytes]] = self._loop.create_future()
        self._waiter = waiter
        self.transport.write(data)
        return waiter

    def on_timeout(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._fail(NodeRequestError("timed out", sent=True, timeout=True))
            self._abort()


class NodeClient:
    """POST bytes to one node over pooled keep-alive connections."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 256,
        connect_timeout_s: float = 2.0,
        idle_timeout_s: float = 15.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = self._port == (443 if parts.scheme == "https" else 80)
        host_header = self._host if default_port else f"{self._host}:{self._port}"
        if ":" in self._host and not default_port:
            host_header = f"[{self._host}]:{self._port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [
            f"POST {path} HTTP/1.1",
            f"Host: {host_header}",
            "Content-Type: application/json",
            "Accept: application/json",
        ]
        if parts.username is not None:
            token = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            head.append("Authorization: Basic " + base64.b64encode(token.encode()).decode())
        self._head = ("\r\n".join(head) + "\r\nContent-Length: ").encode("latin-1")
        self._max = max_connections
        self._idle_timeout = idle_timeout_s
        self._connect_timeout = connect_timeout_s
        self._idle: collections.deque[_Conn] = collections.deque()
        self._all: set[_Conn] = set()
        self._waiters: collections.deque[asyncio.Future[_Conn]] = collections.deque()
        self._opening = 0

    @property
    def open_connections(self) -> int:
        return len(self._all)

    async def post(self, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """(status, body bytes) of one POST, or ``NodeRequestError``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        conn = await self._acquire(loop, timeout_s)
        data = b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
        waiter = conn.request(data)
        timer = loop.call_at(deadline, conn.on_timeout)
        try:
            return await waiter
        except asyncio.CancelledError:
            conn.on_timeout()  # the answer would arrive for nobody: drop the connection
            raise
        finally:
            timer.cancel()

    async def _acquire(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> _Conn:
        idle = self._idle
        now = loop.time()
        while idle:
            conn = idle.pop()  # most recently used first: warm, least likely closed
            if conn.closed:
                continue
            if now - conn.idle_since > self._idle_timeout:
                # idle too long: the node (or a NAT) may drop it mid-request; so
                # are all older ones behind it
                for stale in (conn, *idle):
                    stale._abort()
                idle.clear()
                break
            return conn
        if len(self._all) + self._opening < self._max:
            return await self._open(loop, min(timeout_s, self._connect_timeout))
        waiter: asyncio.Future[_Conn] = loop.create_future()
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise NodeRequestError("no free connection in time", sent=False, timeout=True) from None

    async def _open(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> _Conn:
        self._opening += 1
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Conn(self, loop), self._host, self._port, ssl=self._ssl
                ),
                timeout_s,
            )
        except TimeoutError:
            raise NodeRequestError("connect timed out", sent=False, timeout=True) from None
        except OSError as exc:
            raise NodeRequestError(f"unreachable ({exc.__class__.__name__})", sent=False) from None
        finally:
            self._opening -= 1
        self._all.add(conn)
        return conn

    def _release(self, conn: _Conn) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = conn._loop.time()
        self._idle.append(conn)

    def _discard(self, conn: _Conn) -> None:
        self._all.discard(conn)
        # a waiter blocked on the cap may now open a fresh connection
        while self._waiters and len(self._all) + self._opening < self._max:
            waiter = self._waiters.popleft()
            if not waiter.done():
                task = asyncio.ensure_future(
                    self._open(asyncio.get_running_loop(), self._connect_timeout)
                )
                task.add_done_callback(functools.partial(_hand_over, waiter=waiter))
                break

    async def close(self) -> None:
        for conn in list(self._all):
            conn._abort()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(NodeRequestError("client closed", sent=False))
        self._waiters.clear()
        await asyncio.sleep(0)


def _hand_over(task: asyncio.Future[_Conn], *, waiter: asyncio.Future[_Conn]) -> None:
    if task.cancelled():
        if not waiter.done():
            waiter.cancel()
        return
    exc = task.exception()
    if waiter.done():
        if exc is None:
            task.result()._client._release(task.result())
        return
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(task.result())
