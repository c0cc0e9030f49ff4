"""The connection side: slow-client timeouts, a connection cap, malformed HTTP.

aiohttp closes idle keep-alive connections (``keepalive_timeout``) but has no
timeout for a client that is *sending*: one header byte a second holds a
connection, and a handler waiting on ``request.read()``, forever. Here each
connection gets a watchdog with three phases:

* ``HEAD``: from the connection's start, or the first byte of its next
  request, the whole request head must arrive within
  ``server.header_timeout_s``;
* ``BODY``: once the head is in, the body must arrive within
  ``server.body_timeout_s``;
* idle (between requests) and "handler running" are not watched here; the
  former is aiohttp's keep-alive timeout, the latter the upstream deadline.

Independently of the phase, an answer the client does not read is watched:
once the transport's write buffer passes its high-water mark (the protocol
is paused for writing) it must drain below the low-water mark within
``server.write_timeout_s``, or the connection is aborted (not closed: a
close would wait for a flush that never comes). Without it a client that
never reads pins the answer's buffers, and the handler awaiting ``drain()``,
for as long as it likes.

A phase that overruns closes the connection (counted in
``gateway_client_timeouts`` by phase). The one timer per connection is lazy,
as aiohttp's keep-alive timer: a phase change only writes a deadline, so a
busy keep-alive connection costs no timer operations per request.

``server.max_connections`` caps open connections per process: one more is
answered ``503`` (a JSON-RPC error, ``Connection: close``) and closed.
Malformed HTTP is answered with a JSON-RPC ``Invalid Request`` body and
logged as one line without the request bytes (aiohttp's own message quotes
them, and they may hold an API key); requests pipelined before it in the
same read are answered first (``_PipelineParser``). An ``Expect`` other than
``100-continue`` gets 417 with a JSON-RPC body, and a body that cannot be
read as sent (broken chunked framing) closes the connection after its
answer without a traceback. A body answered before it was read to its end
(413, 415, 405, 401, ...) is never read further (``_gw_refuse_rest``); the
parser never inflates a body (``rpc.inflate`` does, in bounded slices).

The listening half (draining, the port, the doors, gunicorn) is
``server.listener``. It stays whole because the watchdog phases, the cap and
the malformed-HTTP answer all hook the same ``GatewayProtocol`` callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpRequestParser
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.web_protocol import MAX_MSG_QUEUE_SIZE, RequestHandler, RequestPayloadError, _ErrInfo
from aiohttp.web_request import BaseRequest

from gateway.config import ServerConfig
from gateway.rpc import protocol as rpc
from gateway.rpc.errors import CORS_HEADERS
from gateway.rpc.http import BODY_REFUSED
from gateway.telemetry.metrics import Metrics

log = logging.getLogger("gateway.server")

_IDLE: Final = 0
_HEAD: Final = 1
_BODY: Final = 2

_BUSY_BODY: Final = rpc.error_body(rpc.SERVICE_UNAVAILABLE, None, "too many connections")
_BUSY_REPLY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class ConnectionWatch:
    """Per-process settings and counters the protocols share (one per server)."""

    __slots__ = (
        "body_timeout",
        "closing",
        "connections",
        "head_timeout",
        "max_connections",
        "metrics",
        "refused_linger",
        "rejected",
        "timeouts",
        "write_timeout",
    )

    def __init__(self, cfg: ServerConfig, metrics: Metrics | None) -> None:
        self.head_timeout = cfg.header_timeout_s
        self.body_timeout = cfg.body_timeout_s
        self.write_timeout = cfg.write_timeout_s
        self.max_connections = cfg.max_connections
        self.refused_linger = cfg.refused_linger_s
        self.closing = False  # draining: every answer says Connection: close
        self.connections = 0
        self.rejected = 0
        self.timeouts = 0
        self.metrics = metrics


class _PipelineParser(HttpRequestParser):
    """aiohttp's request parser, stopping after each request so a bad one loses only itself.

    aiohttp parses everything a read brought in one go, and a malformed
    request anywhere in it raises away the requests parsed before it: three
    valid pipelined calls followed by garbage in the same write got no
    answer at all, only the 400. This parser is built to pause after every
    complete request (aiohttp's own queue-full pause, at a queue of one) and
    resumes itself until the read is consumed or the connection's queue is
    full, so the requests before the bad one are queued and answered, then
    the 400 (and the close) follow in order. The queue bound is aiohttp's:
    past it the protocol pauses the transport and later resumes the parser.
    """

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any) -> tuple[list[Any], bool, bytes]:
        messages, upgraded, tail = super().feed_data(data, *args, **kwargs)
        if upgraded or not messages:
            return list(messages), upgraded, tail
        out: list[Any] = list(messages)
        queued: Any = getattr(self.protocol, "_messages", ())
        try:
            while len(out) + len(queued) < MAX_MSG_QUEUE_SIZE:
                self.message_consumed()
                more, upgraded, tail = super().feed_data(b"")
                out.extend(more)
                if upgraded or not more:
                    return out, upgraded, tail
        except HttpProcessingError as exc:
            out.append((_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD))
        return out, False, b""


class GatewayProtocol(RequestHandler):
    """aiohttp's request handler plus the watchdog, the cap and drain hints."""

    __slots__ = (
        "_gw_deadline",
        "_gw_linger",
        "_gw_payload",
        "_gw_phase",
        "_gw_timer",
        "_gw_watch",
        "_gw_write_deadline",
    )

    def __init__(
        self, manager: GatewayServer, *, loop: asyncio.AbstractEventLoop, **kwargs: Any
    ) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._parser = _PipelineParser(
            self,
            loop,
            self._read_bufsize,
            max_line_size=self.max_line_size,
            max_field_size=self.max_field_size,
            max_headers=self.max_headers,
            payload_exception=RequestPayloadError,
            auto_decompress=False,  # rpc.inflate inflates, in bounded slices
            max_msg_queue_size=1,
        )
        self._gw_watch = manager.watch
        self._gw_phase = _IDLE
        self._gw_deadline = 0.0
        self._gw_write_deadline = 0.0  # 0: the client reads what we write
        self._gw_timer: asyncio.TimerHandle | None = None
        self._gw_payload: Any = None
        self._gw_linger: asyncio.TimerHandle | None = None

    # -- connection cap ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        watch = self._gw_watch
        if watch.max_connections and watch.connections >= watch.max_connections:
            watch.rejected += 1
            if watch.metrics is not None:
                watch.metrics.connections_rejected.inc()
            self._manager = None  # makes connection_lost a no-op
            tcp = transport if isinstance(transport, asyncio.WriteTransport) else None
            if tcp is not None:
                tcp.write(_BUSY_REPLY)
            transport.close()
            return
        watch.connections += 1
        if watch.metrics is not None:
            watch.metrics.connections.inc()
        super().connection_made(transport)
        if watch.head_timeout > 0:
            self._gw_enter(_HEAD, watch.head_timeout)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._manager is not None:
            watch = self._gw_watch
            watch.connections -= 1
            if watch.metrics is not None:
                watch.metrics.connections.dec()
        timer = self._gw_timer
        if timer is not None:
            timer.cancel()
            self._gw_timer = None
        if self._gw_linger is not None:
            self._gw_linger.cancel()
            self._gw_linger = None
        self._gw_phase = _IDLE
        self._gw_payload = None
        super().connection_lost(exc)

    # -- slow clients --------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._force_close:
            return  # closing (a refused body, a timeout): nothing more is parsed
        count = self._request_count
        super().data_received(data)
        phase = self._gw_phase
        if self._request_count != count:  # one or more request heads completed
            payload = self._messages[-1][1] if self._messages else None
            if payload is None or payload.is_eof():
                self._gw_phase = _IDLE
                self._gw_payload = None
            elif self._gw_watch.body_timeout > 0:
                self._gw_payload = payload
                self._gw_enter(_BODY, self._gw_watch.body_timeout)
            else:
                self._gw_phase = _IDLE
        elif phase == _IDLE:
            if data and self._gw_watch.head_timeout > 0 and self._payload_parser is None:
                self._gw_enter(_HEAD, self._gw_watch.head_timeout)  # not for a websocket
        elif phase == _BODY and self._gw_payload.is_eof():
            self._gw_phase = _IDLE
            self._gw_payload = None

    def _gw_enter(self, phase: int, timeout: float) -> None:
        loop = self._loop
        deadline = loop.time() + timeout
        self._gw_phase = phase
        self._gw_deadline = deadline
        self._gw_arm(deadline)

    def _gw_arm(self, deadline: float) -> None:
        timer = self._gw_timer
        if timer is not None:
            if timer.when() <= deadline:
                return  # fires first, then reschedules itself to the deadline
            timer.cancel()
        self._gw_timer = self._loop.call_at(deadline, self._gw_check)

    # -- clients that do not read --------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        timeout = self._gw_watch.write_timeout
        if timeout > 0:
            self._gw_write_deadline = deadline = self._loop.time() + timeout
            self._gw_arm(deadline)

    def resume_writing(self) -> None:
        self._gw_write_deadline = 0.0  # the timer finds nothing to do and lapses
        super().resume_writing()

    def _gw_check(self) -> None:
        self._gw_timer = None
        transport = self.transport
        if transport is None:
            return
        loop = self._loop
        now = loop.time()
        write_deadline = self._gw_write_deadline
        if write_deadline:
            if now >= write_deadline:
                self._gw_write_stalled(transport)
                return
            self._gw_timer = loop.call_at(write_deadline, self._gw_check)
        phase = self._gw_phase
        if phase == _IDLE or self._force_close:
            return
        if phase == _BODY and self._gw_payload is not None and self._gw_payload.is_eof():
            self._gw_phase = _IDLE
            self._gw_payload = None
            return
        if now < self._gw_deadline:
            self._gw_arm(self._gw_deadline)
            return
        watch = self._gw_watch
        watch.timeouts += 1
        name = "header" if phase == _HEAD else "body"
        if watch.metrics is not None:
            watch.metrics.client_timeouts.labels(name).inc()
        log.info("slow client closed phase=%s remote=%s", name, _peer(self.transport))
        self._gw_phase = _IDLE
        self._gw_payload = None
        self.force_close()

    def _gw_write_stalled(self, transport: asyncio.Transport) -> None:
        watch = self._gw_watch
        watch.timeouts += 1
        if watch.metrics is not None:
            watch.metrics.client_timeouts.labels("write").inc()
        log.info(
            "unread answer, connection aborted after_s=%s buffered=%s remote=%s",
            watch.write_timeout,
            transport.get_write_buffer_size(),
            _peer(transport),
        )
        self._gw_write_deadline = 0.0
        self._force_close = True
        transport.abort()  # drops the buffer; connection_lost wakes the writer

    # -- refused bodies --------------------------------------------------------
    def _gw_refuse_rest(self) -> None:
        """A body answered before it was read to its end is never read further.

        aiohttp would read it after the handler (``lingering_time``) and inflate
        a gzip body as it came. Instead, as nginx does: the answer (written,
        with ``Connection: close``) is followed by a half-close, what the client
        still sends is dropped unparsed for at most ``server.refused_linger_s``
        (closing with unread bytes would reset the answer away), then it closes.
        """
        transport = self.transport
        self._force_close = True  # start() neither lingers nor reads another request
        self._gw_phase = _IDLE
        self._gw_payload = None
        if transport is None:
            return
        linger = self._gw_watch.refused_linger
        if linger > 0 and transport.can_write_eof():
            with contextlib.suppress(OSError):  # the peer is gone already: just close
                transport.write_eof()  # FIN after the answer: the client sees the close now
                with contextlib.suppress(RuntimeError):  # a full body buffer paused it
                    transport.resume_reading()
                self._gw_linger = self._loop.call_later(linger, self._gw_linger_end)
                return
        transport.close()

    def _gw_linger_end(self) -> None:
        self._gw_linger = None
        transport = self.transport
        if transport is None:
            return
        if transport.get_write_buffer_size():
            transport.abort()  # the answer is still unread after the linger: drop it
        else:
            transport.close()

    # -- drain ---------------------------------------------------------------
    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        if (self._close or self._gw_watch.closing) and not resp.prepared:
            resp.force_close()  # shutting down: tell the client not to reuse the connection
        if isinstance(resp, web.HTTPExpectationFailed):
            resp = _expect_refused()
        payload = request.content
        refused = BODY_REFUSED in request or (
            not payload.is_eof() and payload.exception() is None and not self._upgraded
        )
        if refused and not resp.prepared:
            resp.force_close()  # the body was not read to its end: it never will be
        if payload.exception() is not None:
            # The body could not be read (not its Content-Encoding, a broken
            # chunk): the parser has stopped, so this connection can carry no
            # further request. Close it after the answer, and mark the body
            # finished so aiohttp does not read it again after the handler
            # (that read re-raises and logged a second traceback per request).
            if not resp.prepared:
                resp.force_close()
            payload.feed_eof()
        if not refused:
            return await super().finish_response(request, resp, start_time)
        result = await super().finish_response(request, resp, start_time)
        self._gw_refuse_rest()
        return result

    # -- malformed HTTP ------------------------------------------------------
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A JSON-RPC error instead of aiohttp's text; no request bytes in the log."""
        if request.writer.output_size > 0:
            raise ConnectionError("response already sent, cannot send another")
        if status >= 500:
            kind = rpc.UPSTREAM_TIMEOUT if status == 504 else rpc.INTERNAL_ERROR
            if exc is not None and status == 500:
                log.error(
                    "unhandled error path=%s error=%s",
                    _path_head(request),
                    type(exc).__name__,
                    exc_info=exc,
                )
        else:
            kind = rpc.INVALID_REQUEST
            log.info(
                "bad http request status=%s error=%s remote=%s",
                status,
                type(exc).__name__ if exc is not None else "-",
                request.remote,
            )
        resp = web.Response(
            status=status, body=rpc.error_body(kind), content_type="application/json"
        )
        resp.force_close()
        return resp


def _expect_refused() -> web.Response:
    """aiohttp's text 417 for an ``Expect`` other than ``100-continue``, as JSON-RPC.

    417 stays (RFC 9110 §10.1.1); the body is the -32600 every other refusal
    of the request's framing gets. The header's value is not echoed. The
    connection closes: the client may still be holding its body back.
    """
    resp = web.Response(
        status=417,
        body=rpc.error_body(rpc.INVALID_REQUEST, None, "only Expect: 100-continue is supported"),
        content_type="application/json",
        headers=CORS_HEADERS,  # like every RPC answer: a browser sees the error
    )
    resp.force_close()
    return resp


def _peer(transport: Any) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) and peer else "-"


def _path_head(request: BaseRequest) -> str:
    """The first path segment only: a key may follow it."""
    try:
        return "/" + request.path[1:].partition("/")[0]
    except Exception:  # a request that failed parsing may have no usable path
        return "-"


class GatewayServer(web.Server):
    """``web.Server`` whose connections are ``GatewayProtocol``s (or the lean door's)."""

    watch: ConnectionWatch
    make_protocol: Callable[..., RequestHandler] = GatewayProtocol

    def __call__(self) -> RequestHandler:
        return self.make_protocol(self, loop=self._loop, **self._kwargs)
