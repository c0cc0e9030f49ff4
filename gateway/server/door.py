"""The lean door (``server.door = "lean"``): RPC POSTs answered without aiohttp's objects.

Serving a small cached call through ``web.Application`` costs about three
times what the same answer costs on aiohttp's bare C parser
(``python -m bench.micro.serving``, docs/PERFORMANCE.md): the request
object, the router, the response object and its header multidict are most
of it. This door keeps everything the connection needs from aiohttp and the
gateway's ``GatewayProtocol`` (the C parser, keep-alive, pipelining order,
the header / body / write watchdog, the connection cap, drain) and changes
one thing: a request that is certainly an RPC call is answered by
``RpcHttp.serve`` writing its bytes straight onto the transport. Everything
else (the dashboard, health, an upgrade to a WebSocket, other methods, any
path that is not plainly ``/<network>`` or ``/<network>/<key>``) is built
into a ``web.Request`` and handed to the application exactly as before, on
the same connection, in order.

A request takes the lean path only when nothing about it needs aiohttp's
judgment: ``POST``, HTTP/1.1, no ``Upgrade``, an ``Expect`` that is absent
or ``100-continue``, and a path that is exactly a network prefix, or one
plus a segment of letters, digits, ``-`` and ``_`` (no ``%``, dots or
query: the router would decode or normalise those). Both doors answer from
the same ``RpcHttp.serve``; only the writes differ (``LeanCall`` implements
``rpc.http.HttpOut``, whose streaming writes ``rpc.delivery`` drives for a
relayed answer and a node failure alike), and the answers are compared byte
for byte (but ``Date``), error paths included, in
``tests/integration/test_door_parity.py``.

It stays whole because the door's three parts (which requests it takes,
the call that reads and writes them, the protocol that hooks aiohttp's
loop) are one contract with aiohttp's ``start()`` loop, read together.

Private aiohttp API used (the pins in pyproject.toml bound the versions):
``RequestHandler._request_factory`` / ``_handle_request`` (the per-message
hooks of its ``start()`` loop), ``_request_in_progress`` /
``_handler_waiter`` (what ``shutdown()`` waits on), ``_current_request``
(whose ``_cancel`` ``connection_lost()`` calls), ``_close`` /
``_force_close`` (set before ``start()`` would linger reading a refused
body), ``BaseProtocol._drain_helper`` and
``aiohttp.helpers.rfc822_formatted_time`` (the cached ``Date``).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.helpers import rfc822_formatted_time, set_exception
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11, StreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.app import HANDLERS
from gateway.rpc.errors import CORS_HEADERS
from gateway.rpc.http import CONTINUE, PREFLIGHT_HEADERS, RpcHttp, reply_headers
from gateway.rpc.replies import Answer
from gateway.server.connection import GatewayProtocol

_REASONS: Final = {s.value: s.phrase for s in HTTPStatus}
_KEY: Final = r"[A-Za-z0-9_-]+"


class Door:
    """Which requests the lean path takes, and each network's ``RpcHttp``."""

    def __init__(self, handlers: Sequence[RpcHttp]) -> None:
        self.routes = {h.network.prefix: h for h in handlers}
        prefixes = sorted(self.routes, key=len, reverse=True)
        alternatives = "|".join(re.escape(p) for p in prefixes) or "(?!)"
        self._match = re.compile(rf"({alternatives})(?:/({_KEY}))?").fullmatch
        self.taken = 0  # requests this door answered itself (tests read it)

    def route(self, message: RawRequestMessage) -> tuple[RpcHttp, dict[str, str]] | None:
        """The network and match info of a lean request; None: the application's."""
        if message.method != hdrs.METH_POST or message.version != HttpVersion11 or message.upgrade:
            return None
        expect = message.headers.get(hdrs.EXPECT)
        if expect is not None and expect.lower() != "100-continue":
            return None  # the application answers 417
        found = self._match(message.path)
        if found is None:
            return None
        prefix, key = found.groups()
        self.taken += 1
        return self.routes[prefix], ({} if key is None else {"key": key})


class Sent:
    """What a lean answer was, for the start() loop and the access log."""

    __slots__ = ("headers", "keep_alive", "status")

    def __init__(self, status: int, headers: Mapping[str, str], keep_alive: bool) -> None:
        self.status = status
        self.headers = headers
        self.keep_alive = keep_alive


class LeanCall:
    """One lean request: what ``RpcHttp.serve`` reads, and the writes it asks for."""

    __slots__ = (
        "_keys",
        "_streamed",
        "_task",
        "headers",
        "http",
        "match_info",
        "message",
        "payload",
        "protocol",
        "refused",
        "writer",
    )

    method = hdrs.METH_POST

    def __init__(
        self,
        http: RpcHttp,
        match_info: dict[str, str],
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: LeanProtocol,
        writer: StreamWriter,
        task: Any,
    ) -> None:
        self.http = http
        self.match_info = match_info
        self.message = message
        self.headers: CIMultiDictProxy[str] = message.headers
        self.payload = payload
        self.protocol = protocol
        self.writer = writer
        self._task = task  # the start() loop clears it after each request
        self._keys: dict[Any, str] = {}
        self._streamed: dict[str, str] | None = None
        self.refused = False  # its body was refused: closed after the answer, never read

    # -- what the pipeline and the access log read ---------------------------
    @property
    def path(self) -> str:
        return self.message.path  # plain characters only (Door.route), so already decoded

    @property
    def content_length(self) -> int | None:
        length = self.headers.get(hdrs.CONTENT_LENGTH)
        return None if length is None else int(length)  # the parser checked its digits

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.protocol.transport

    @property
    def remote(self) -> str | None:
        peer = self.protocol.peername
        if peer is None:
            return None
        return str(peer[0]) if isinstance(peer, (list, tuple)) else str(peer)

    @property
    def content(self) -> StreamReader:
        return self.payload  # read by rpc.inflate, as web.Request.content is

    def _cancel(self, exc: BaseException) -> None:
        """The connection is gone (or draining): a body read still waiting raises ``exc``."""
        set_exception(self.payload, exc)

    def __setitem__(self, key: web.RequestKey[str], value: str) -> None:
        self._keys[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self._keys.get(key, default)

    # -- the writes (rpc.http.HttpOut) --------------------------------------
    def _keep_alive(self) -> bool:
        protocol = self.protocol
        if self.message.should_close or protocol._close or protocol._force_close:
            return False
        if protocol._gw_watch.closing:  # draining: the client's next call goes elsewhere
            return False
        # A body whose framing broke: the parser has stopped, so the connection
        # carries no further request. A body not read to its end (refused):
        # it is never read further, the connection closes after the answer.
        payload = self.payload
        return payload.exception() is None and payload.is_eof() and not self.refused

    def _head(self, status: int, headers: dict[str, str], keep: bool) -> str:
        headers[hdrs.DATE] = rfc822_formatted_time()
        headers[hdrs.SERVER] = SERVER_SOFTWARE
        if not keep:
            headers[hdrs.CONNECTION] = "close"
        lines = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
        if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
            raise ValueError("newline or carriage return in a response header")
        return f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n{lines}\r\n"

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> Sent:
        keep = self._keep_alive()
        head = self._head(status, headers, keep)
        transport = self.protocol.transport
        if transport is not None:
            transport.write(head.encode() + body)
        if self.payload.exception() is not None:
            self.payload.feed_eof()  # so the start() loop does not read it again
        return Sent(status, headers, keep)

    def whole(self, answer: Answer, extra: Mapping[str, str] | None = None) -> Sent:
        headers = reply_headers(answer, extra)
        if answer.status == 204:
            return self._send(204, headers, b"")
        body = answer.body
        headers[hdrs.CONTENT_TYPE] = "application/json"
        headers[hdrs.CONTENT_LENGTH] = str(len(body))
        return self._send(answer.status, headers, body)

    def preflight(self) -> Sent:
        return self._send(204, dict(PREFLIGHT_HEADERS), b"")  # not reached: OPTIONS is the app's

    def refuse(self) -> None:
        self.refused = True

    async def proceed(self) -> None:
        if hdrs.EXPECT in self.headers:  # only 100-continue reaches here (Door.route)
            transport = self.protocol.transport
            if transport is not None:
                transport.write(CONTINUE)

    async def start(self, answer: Answer, length: int | None) -> None:
        headers = dict(answer.headers)
        headers.update(CORS_HEADERS)
        headers[hdrs.CONTENT_TYPE] = "application/json"
        writer = self.writer
        if length is not None:
            headers[hdrs.CONTENT_LENGTH] = str(length)
            writer.length = length
        else:
            writer.enable_chunking()
            headers[hdrs.TRANSFER_ENCODING] = "chunked"
        keep = self._keep_alive()
        head = self._head(200, headers, keep)
        self._streamed = headers
        await writer.write_headers(head[: head.index("\r\n")], CIMultiDict(headers))

    async def write(self, chunk: bytes) -> None:
        await self.writer.write(chunk)

    async def end(self) -> Sent:
        await self.writer.write_eof()
        headers = self._streamed or {}
        return Sent(200, headers, hdrs.CONNECTION not in headers)

    def cut(self) -> Sent:
        transport = self.protocol.transport
        if transport is not None:
            transport.abort()
        return Sent(200, self._streamed or {}, False)

    def gone(self) -> Sent:
        return Sent(200 if self._streamed is not None else 499, self._streamed or {}, False)

    def status(self, result: Sent) -> int:
        return result.status

    async def serve(self) -> Sent:
        sent = await self.http.serve(self, self)
        protocol = self.protocol
        if protocol.writing_paused:
            await protocol._drain_helper()  # the write watchdog bounds this wait
        return sent


class LeanProtocol(GatewayProtocol):
    """``GatewayProtocol`` whose start() loop answers lean requests itself."""

    __slots__ = ("_gw_app_factory", "_gw_door")

    def __init__(self, manager: Any, door: Door, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._gw_door = door
        self._gw_app_factory = self._request_factory
        self._request_factory = self._gw_make_request  # type: ignore[assignment]

    def _gw_make_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: StreamWriter,
        task: Any,
    ) -> Any:
        route = self._gw_door.route(message)
        if route is None:
            assert self._gw_app_factory is not None
            return self._gw_app_factory(message, payload, protocol, writer, task)
        http, match_info = route
        return LeanCall(http, match_info, message, payload, self, writer, task)

    async def _handle_request(self, request: Any, start_time: float | None, handler: Any) -> Any:
        if type(request) is not LeanCall:
            return await super()._handle_request(request, start_time, handler)
        self._request_in_progress = True
        self._current_request = request  # type: ignore[assignment]  # only _cancel is called
        try:
            sent = await request.serve()
        except ConnectionError:
            return Sent(499, {}, False), True
        else:
            if request.refused or not request.payload.is_eof():
                self._gw_refuse_rest()  # before start() would linger, reading it
        finally:
            self._current_request = None
            self._request_in_progress = False
            if self._handler_waiter is not None:
                self._handler_waiter.set_result(None)
        self.log_access(request, sent, start_time)  # type: ignore[arg-type]
        return sent, False


def lean_protocol(app: web.Application) -> Callable[..., RequestHandler]:
    """The protocol factory for ``server.door = "lean"`` (``GatewayRunner`` calls it)."""
    handlers: list[RpcHttp] = app.get(HANDLERS) or []
    return functools.partial(LeanProtocol, door=Door(handlers))
