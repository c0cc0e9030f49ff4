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

Large answers are not held whole: with ``stream_over``, a 2xx answer longer
than that (or of unknown length) is handed over as a ``NodeStream`` as soon
as its head is in. The payload buffer is aiohttp's ``StreamReader``, which
pauses reading the node's socket above ``2 * _PARSER_LIMIT`` bytes and
resumes once the reader has taken them, so a client that does not read
holds the node connection paused, not hundreds of megabytes. ``max_bytes``
caps any answer: refused from its Content-Length when that is known,
cut off when the bytes run past it.

It stays whole because the client, the connection protocol and the stream share
one connection's life on every call (its parser, its deadline timer, its return
to the pool once a stream is read out or aborted).
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

from gateway.upstream.errors import UpstreamError

# The payload buffer: reading the node pauses above twice this many unread bytes.
_PARSER_LIMIT = 2**17


class NodeStream:
    """A 2xx answer still arriving; ``read`` it to the end or ``close`` it.

    Reading to the end hands the connection back to the pool; ``close``
    before the end drops it (the rest of the answer is for nobody).
    """

    __slots__ = ("_conn", "_done", "_max", "_payload", "_seen", "_timeout", "length")

    def __init__(
        self, conn: _Conn, payload: Any, length: int | None, max_bytes: int | None, timeout_s: float
    ) -> None:
        self._conn = conn
        self._payload = payload
        self.length = length  # the node's Content-Length, when it sent one
        self._max = max_bytes
        self._timeout = timeout_s  # for each read: a node that stalls mid-answer
        self._seen = 0
        self._done = False

    async def read(self) -> bytes:
        """The next chunk, ``b""`` at the end; ``UpstreamError`` on failure."""
        if self._done:
            return b""
        try:
            chunk: bytes = await asyncio.wait_for(self._payload.readany(), self._timeout)
        except TimeoutError:
            self.close()
            raise UpstreamError("timed out mid-answer", sent=True, timeout=True) from None
        except UpstreamError:
            self.close()
            raise
        except Exception as exc:  # the parser's framing errors, set on the payload
            self.close()
            raise UpstreamError(f"answer broken: {exc!r}", sent=True) from None
        if not chunk:
            self._done = True
            self._conn._stream_done()
            return b""
        self._seen += len(chunk)
        if self._max is not None and self._seen > self._max:
            self.close()
            raise UpstreamError("answer over the size limit", sent=True, too_large=True)
        return chunk

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._conn._abort()


class _Conn(BaseProtocol):
    """One connection; at most one request in flight (no pipelining)."""

    def __init__(self, client: NodeClient, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._client = client
        parser = HttpResponseParser(
            self, loop, _PARSER_LIMIT, read_until_eof=True, auto_decompress=False
        )
        self._http = parser
        self._parser = parser  # BaseProtocol pauses/resumes this one under flow control
        self._waiter: asyncio.Future[tuple[int, bytes | NodeStream]] | None = None
        self._payload: Any = None
        self._status = 0
        self._keep = True
        self._body: list[bytes] = []
        self._size = 0
        self._max_bytes: int | None = None
        self._stream_over: int | None = None
        self._timeout_s = 0.0
        self._streaming = False  # a NodeStream owns the payload now
        self._draining = False
        self.closed = False
        self.idle_since = 0.0

    # -- asyncio.Protocol --------------------------------------------------------
    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self.closed = True
        if self._streaming:
            payload = self._payload
            with contextlib.suppress(HttpProcessingError):
                self._http.feed_eof()  # completes a body delimited by the close
            if payload is not None and not payload.is_eof():
                payload.set_exception(UpstreamError("connection lost mid-answer", sent=True))
            self._client._discard(self)
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._payload is not None:
            # a body delimited by the connection's end is complete now
            with contextlib.suppress(HttpProcessingError):
                self._http.feed_eof()
            if self._payload.is_eof():
                self._drain()
                return
        self._fail(
            UpstreamError(f"connection lost: {exc!r}" if exc else "connection closed", sent=True)
        )
        self._client._discard(self)

    def data_received(self, data: bytes) -> None:
        if not data:
            # BaseProtocol.resume_reading() re-enters here with b"" to resume a
            # paused parser; while we are draining, the drain loop handles it.
            if self._draining or (self._waiter is None and not self._streaming):
                return
        elif self._waiter is None and not self._streaming:
            self._abort()  # nothing asked: the node broke protocol; drop it
            return
        try:
            messages, _, _ = self._http.feed_data(data)
        except HttpProcessingError as exc:
            error = UpstreamError(f"bad HTTP from node: {exc}", sent=True)
            if self._streaming and self._payload is not None:
                self._payload.set_exception(error)
            self._fail(error)
            self._abort()
            return
        if self._streaming:
            return  # the payload buffer has it; the NodeStream's reader takes it
        for message, payload in messages:
            self._status = message.code
            self._keep = not message.should_close
            self._payload = payload
            if self._head_in(message, payload):
                return
        if self._payload is not None:
            self._drain()

    # -- internals -----------------------------------------------------------------
    def _head_in(self, message: Any, payload: Any) -> bool:
        """Refuse an answer over the cap, or hand a large one over as a stream."""
        raw_length = message.headers.get("Content-Length")
        length = int(raw_length) if raw_length is not None and raw_length.isdigit() else None
        if self._max_bytes is not None and length is not None and length > self._max_bytes:
            self._fail(
                UpstreamError(f"answer of {length} bytes over the limit", sent=True, too_large=True)
            )
            self._abort()
            return True
        over = self._stream_over
        if (
            over is None
            or not 200 <= message.code < 300
            or (length is not None and length <= over)
            or payload.is_eof()
        ):
            return False
        self._streaming = True
        waiter, self._waiter = self._waiter, None
        stream = NodeStream(self, payload, length, self._max_bytes, self._timeout_s)
        if waiter is not None and not waiter.done():
            waiter.set_result((message.code, stream))
        else:
            stream.close()
        return True

    def _stream_done(self) -> None:
        """The NodeStream read the whole answer: the connection is free again."""
        self._streaming = False
        self._payload = None
        if self._keep and not self.closed:
            self._client._release(self)
        else:
            self._abort()

    def _drain(self) -> None:
        payload = self._payload
        self._draining = True
        try:
            chunk = payload.read_nowait(-1)
        finally:
            self._draining = False
        if chunk:
            self._body.append(chunk)
            self._size += len(chunk)
            if self._max_bytes is not None and self._size > self._max_bytes:
                self._fail(UpstreamError("answer over the size limit", sent=True, too_large=True))
                self._abort()
                return
        if not payload.is_eof():
            return
        waiter, self._waiter, self._payload = self._waiter, None, None
        body, self._body, self._size = b"".join(self._body), [], 0
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, body))
        if self._keep and not self.closed:
            self._client._release(self)
        else:
            self._abort()

    def _fail(self, exc: UpstreamError) -> None:
        waiter, self._waiter, self._payload = self._waiter, None, None
        self._body, self._size = [], 0
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._client._discard(self)

    def request(
        self, data: bytes, max_bytes: int | None, stream_over: int | None, timeout_s: float
    ) -> asyncio.Future[tuple[int, bytes | NodeStream]]:
        assert self.transport is not None
        waiter: asyncio.Future[tuple[int, bytes | NodeStream]] = self._loop.create_future()
        self._waiter = waiter
        self._max_bytes = max_bytes
        self._stream_over = stream_over
        self._timeout_s = timeout_s
        self.transport.write(data)
        return waiter

    def on_timeout(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._fail(UpstreamError("timed out", sent=True, timeout=True))
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

    async def post(
        self,
        body: bytes,
        timeout_s: float,
        *,
        max_bytes: int | None = None,
        stream_over: int | None = None,
        traceparent: bytes | None = None,
    ) -> tuple[int, bytes | NodeStream]:
        """(status, answer) of one POST, or ``UpstreamError``.

        The answer is its bytes, or a ``NodeStream`` for a 2xx answer longer
        than ``stream_over`` (or of unknown length) when that is given.
        ``traceparent``: one more header, the call's W3C trace context.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        conn = await self._acquire(loop, timeout_s)
        if traceparent is None:
            data = b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
        else:
            head = b"%s%d\r\ntraceparent: %s" % (self._head, len(body), traceparent)
            data = b"%s\r\n\r\n%s" % (head, body)
        waiter = conn.request(data, max_bytes, stream_over, timeout_s)
        timer = loop.call_at(deadline, conn.on_timeout)
        try:
            return await waiter
        except asyncio.CancelledError:
            conn.on_timeout()  # the answer would arrive for nobody: drop the connection
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                answer = waiter.result()[1]
                if isinstance(answer, NodeStream):
                    answer.close()
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
            raise UpstreamError("no free connection in time", sent=False, timeout=True) from None

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
            raise UpstreamError("connect timed out", sent=False, timeout=True) from None
        except OSError as exc:
            raise UpstreamError(f"unreachable ({exc.__class__.__name__})", sent=False) from None
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
                waiter.set_exception(UpstreamError("client closed", sent=False))
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
