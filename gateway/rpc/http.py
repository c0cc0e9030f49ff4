"""The HTTP adapter: a POST body into the pipeline, its ``Answer`` out as a response.

Only what is HTTP lives here: the preflight, 405 / 415 / 413, ``100
Continue`` only after those checks, reading the body (``rpc.inflate``: bounded,
inflated in slices; a body that is not what its ``Content-Encoding`` says is a
400 JSON-RPC error, never a 500), the key from the path or the Bearer header,
CORS on every answer, 204 for notifications, and a large answer streamed
with ``resp.write`` waiting for the socket to drain (``rpc.delivery`` decides
what is written and when; the doors only write).
Metrics and request insight are recorded once per request (``Pipeline.record``).

Two doors serve it (``server.door``): aiohttp's application (``handle``,
``AppOut``) and the lean door (``gateway.server.door``), each through the
few writes of ``HttpOut``; ``serve`` decides what is written. It stays whole
because those writes are the contract between ``serve`` and both doors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol, TypeVar

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from multidict import CIMultiDictProxy

from gateway.limits.limiter import ip_bits
from gateway.rpc import protocol as rpc
from gateway.rpc.auth import BAD_KEY, extract_key, key_hash, well_formed
from gateway.rpc.clientip import ClientIP
from gateway.rpc.delivery import deliver
from gateway.rpc.errors import CORS_HEADERS
from gateway.rpc.inflate import TAKEN, BodyRefused, coding_refused, read_body
from gateway.rpc.pipeline import Caller, Pipeline
from gateway.rpc.replies import Answer, error_answer
from gateway.rpc.served import BY_GATEWAY, NODE_HEADER
from gateway.typedefs import KEY_ID, RPC_METHOD

log = logging.getLogger("gateway.rpc")

R = TypeVar("R")
Refusal = tuple[Answer, Mapping[str, str] | None]

# The W3C trace-context headers a client may send; read only when tracing is on.
TRACE_HEADERS = ("traceparent", "tracestate")
JSON_TYPES = frozenset({"application/json", "application/json-rpc", "application/jsonrequest"})
# Set on a request whose body was refused (server.connection closes its connection).
BODY_REFUSED: web.RequestKey[bool] = web.RequestKey("gateway_body_refused", bool)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Max-Age": "86400",
}


class RpcHttp:
    """Serves one network's prefix over HTTP; one instance per network.

    A peer of the WebSocket adapter (``ws.upgrade.WsRoute``): both feed the
    network's one pipeline. ``client_ip`` is the app's (the same trusted
    proxies as the dashboard).
    """

    def __init__(self, pipeline: Pipeline, client_ip: ClientIP) -> None:
        self.pipeline = pipeline
        self.client_ip = client_ip
        self.network = pipeline.network
        self.max_body = pipeline.cfg.limits.max_body_bytes
        self.max_ratio = pipeline.cfg.limits.max_inflate_ratio

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The application's route handler: the answer as an aiohttp response."""
        return await self.serve(request, AppOut(request))

    async def serve(self, request: RpcRequest, out: HttpOut[R]) -> R:
        """One request through the pipeline, its answer written through ``out``.

        Both doors call this (``handle`` above and the lean door in
        ``gateway.server.door``), so what is answered never depends on the
        door; only how the bytes are written does.
        """
        started = time.perf_counter()
        method, caller, answer = "-", None, None
        try:
            refused = self._check_http(request)
            if refused is not None:
                if not isinstance(refused, tuple):
                    return out.preflight()
                if request.content is not EMPTY_PAYLOAD:
                    out.refuse()  # judged on its head: its body is never read
                return out.whole(*refused)
            await out.proceed()  # 100 Continue, only now that the head is acceptable
            body = await self._read(request)
            if isinstance(body, Answer):
                out.refuse()  # what is left of it is never read
                response = out.whole(body)
            else:
                caller = self._caller(request)
                answer = await self.pipeline.run(body, caller)
                method = answer.method
                request[RPC_METHOD] = method
                request[KEY_ID] = answer.key_id
                if answer.relay is not None:
                    assert caller.khash is not None  # only an admitted call is relayed
                    errors = self.pipeline.errors
                    response = await deliver(out, answer, self.network.name, errors, caller.khash)
                else:
                    response = out.whole(answer)
                answer.settle(True)
        except Exception:  # never a traceback to the client
            log.exception("internal error network=%s", self.network.name)
            if answer is not None:
                answer.settle(False)
            response = out.whole(error_answer(rpc.INTERNAL_ERROR))
        elapsed = time.perf_counter() - started
        status = out.status(response)
        self.pipeline.net_metrics.answered(method, status, elapsed)
        if answer is not None and caller is not None:
            self.pipeline.record(caller, answer, status, elapsed)
        return response

    def _caller(self, request: RpcRequest) -> Caller:
        key = rpc_key(request)
        if key is None:
            caller = Caller(None)
        else:
            ip = self.client_ip(request)
            caller = Caller(key_hash(key), request.headers.get(hdrs.ORIGIN, ""), ip, ip_bits(ip))
        if self.pipeline.tracer is not None:  # the client's trace context, continued
            headers = request.headers
            caller.trace = {h: headers[h] for h in TRACE_HEADERS if h in headers}
        return caller

    def _check_http(self, request: RpcRequest) -> Refusal | bool | None:
        """The preflight (True), a path with no key, 405 / 415 / 413 (declared length).

        Everything here is decided on the head alone, before any body byte is
        read and before ``100 Continue``: a refused body is never read (the
        doors close the connection instead). A client that waits for ``100
        Continue`` has sent no body yet, so its key's shape is checked here
        too (401); without ``Expect`` the key is judged after the body, as
        the pipeline always has (its answer echoes the call's id).
        """
        method = request.method
        if method == hdrs.METH_OPTIONS:
            return True
        if method != hdrs.METH_POST:
            if "tail" in request.match_info:  # /bsc/, /bsc/KEY/extra: no key (a WS upgrade too)
                return error_answer(rpc.UNAUTHORIZED), None
            return (
                error_answer(rpc.METHOD_NOT_ALLOWED, None, "use POST"),
                {hdrs.ALLOW: "POST, OPTIONS"},
            )
        ctype = request.headers.get(hdrs.CONTENT_TYPE)
        if ctype is not None:
            mime = ctype.partition(";")[0].strip().lower()
            if mime not in JSON_TYPES and not mime.endswith("+json"):
                data = "Content-Type must be application/json"
                return error_answer(rpc.UNSUPPORTED_MEDIA_TYPE, None, data), None
        if coding_refused(request.headers.get(hdrs.CONTENT_ENCODING)):
            data = f"Content-Encoding must be {TAKEN} or identity"
            answer = error_answer(rpc.UNSUPPORTED_MEDIA_TYPE, None, data)
            return answer, {hdrs.ACCEPT_ENCODING: TAKEN}  # what RFC 7694 asks of this 415
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._too_large(), None
        if hdrs.EXPECT in request.headers and rpc_key(request) is None:
            return error_answer(rpc.UNAUTHORIZED), None
        return None

    async def _read(self, request: RpcRequest) -> bytes | Answer:
        try:
            coding = request.headers.get(hdrs.CONTENT_ENCODING)
            body = await read_body(request.content, coding, self.max_body, self.max_ratio)
        except BodyRefused as exc:
            kind = rpc.BODY_TOO_LARGE if exc.too_large else rpc.BAD_BODY
            return error_answer(kind, None, exc.reason)
        except web.RequestPayloadError:  # broken chunked framing
            data = "body does not match its Content-Encoding"
            return error_answer(rpc.BAD_BODY, None, data)
        except ConnectionError:  # client gone, or too slow (server.body_timeout_s)
            return error_answer(rpc.REQUEST_TIMEOUT, None, "body incomplete")
        except Exception:
            # Whatever the payload raises once its connection is closed (a slow
            # client cut by server.body_timeout_s mid-read) is that client gone,
            # not an internal error: no traceback in the log for it.
            transport = request.transport
            if transport is None or transport.is_closing():
                return error_answer(rpc.REQUEST_TIMEOUT, None, "body incomplete")
            raise
        if len(body) > self.max_body:
            return self._too_large()
        return body

    def _too_large(self) -> Answer:
        data = f"body exceeds {self.max_body} bytes"
        return error_answer(rpc.BODY_TOO_LARGE, None, data)


class RpcRequest(Protocol):
    """What ``RpcHttp.serve`` reads of a request: ``web.Request`` or the lean door's call."""

    @property
    def method(self) -> str: ...
    @property
    def headers(self) -> CIMultiDictProxy[str]: ...
    @property
    def match_info(self) -> Mapping[str, str]: ...
    @property
    def content_length(self) -> int | None: ...
    @property
    def remote(self) -> str | None: ...
    @property
    def transport(self) -> asyncio.Transport | None: ...
    @property
    def content(self) -> StreamReader: ...
    def __setitem__(self, key: web.RequestKey[str], value: str) -> None: ...


class HttpOut(Protocol[R]):
    """The few writes a door implements; ``RpcHttp`` decides what is written.

    ``whole`` answers at once (``extra``: headers after CORS, e.g. ``Allow``);
    ``refuse`` marks the body refused (before ``whole``): the answer says
    ``Connection: close`` and the door closes the connection without reading
    the body any further; ``proceed`` sends ``100 Continue`` to a client that waits for it, once the
    request's head has passed every check;
    ``start`` / ``write`` / ``end`` / ``cut`` / ``gone`` are the writes
    ``rpc.delivery.deliver`` streams a relayed answer with (``cut`` drops the
    connection after a streamed head). ``status`` reads back the status a
    result carries.
    """

    def whole(self, answer: Answer, extra: Mapping[str, str] | None = None) -> R: ...
    def preflight(self) -> R: ...
    def refuse(self) -> None: ...
    async def proceed(self) -> None: ...
    async def start(self, answer: Answer, length: int | None) -> None: ...
    async def write(self, chunk: bytes) -> None: ...
    async def end(self) -> R: ...
    def cut(self) -> R: ...
    def gone(self) -> R: ...
    def status(self, result: R) -> int: ...


class AppOut:
    """The application door's writes: aiohttp responses."""

    __slots__ = ("_request", "_resp")

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._resp: web.StreamResponse | None = None

    def whole(self, answer: Answer, extra: Mapping[str, str] | None = None) -> web.StreamResponse:
        resp = http_reply(answer, extra)
        if BODY_REFUSED in self._request:
            resp.force_close()
        return resp

    def preflight(self) -> web.StreamResponse:
        return web.Response(status=204, headers=PREFLIGHT_HEADERS)

    def refuse(self) -> None:
        self._request[BODY_REFUSED] = True  # server.connection closes after the answer

    async def proceed(self) -> None:
        request = self._request
        if request.version == HttpVersion11 and hdrs.EXPECT in request.headers:
            await request.writer.write(CONTINUE)  # expect_later let only 100-continue through
            request.writer.output_size = 0  # the answer's head is still to come

    async def start(self, answer: Answer, length: int | None) -> None:
        resp = self._resp = web.StreamResponse(status=200, headers=answer.headers)
        resp.headers.update(CORS_HEADERS)
        resp.content_type = "application/json"
        if length is not None:
            resp.content_length = length
        await resp.prepare(self._request)

    async def write(self, chunk: bytes) -> None:
        assert self._resp is not None
        await self._resp.write(chunk)

    async def end(self) -> web.StreamResponse:
        assert self._resp is not None
        await self._resp.write_eof()
        return self._resp

    def cut(self) -> web.StreamResponse:
        assert self._resp is not None
        if self._request.transport is not None:
            self._request.transport.abort()
        return self._resp

    def gone(self) -> web.StreamResponse:
        return self._resp if self._resp is not None else web.Response(status=499)

    def status(self, result: web.StreamResponse) -> int:
        return result.status


async def expect_later(request: web.Request) -> None:
    """The RPC routes' ``expect_handler``: ``100 Continue`` waits for ``RpcHttp.serve``.

    aiohttp's default sends it before the handler runs, so a 50 MB body was
    invited and then refused. Only the refusal of another expectation (417)
    stays here, as aiohttp words it (``server.connection`` turns it into JSON).
    """
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version == HttpVersion11 and expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")


def reply_headers(answer: Answer, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A whole answer's headers, in the order they are written (both doors)."""
    headers = dict(answer.headers)
    headers.update(CORS_HEADERS)
    if extra:
        headers.update(extra)
    if NODE_HEADER not in headers:  # answered before the pipeline (405, 413, ...)
        headers.update(BY_GATEWAY)
    return headers


def http_reply(answer: Answer, extra: Mapping[str, str] | None = None) -> web.Response:
    headers = reply_headers(answer, extra)
    if answer.status == 204:
        return web.Response(status=204, headers=headers)
    return web.Response(
        body=answer.body, status=answer.status, content_type="application/json", headers=headers
    )


def rpc_key(request: RpcRequest) -> str | None:
    """The request's well-formed key, or None (missing, malformed, mismatched)."""
    match = request.match_info
    if "tail" in match:  # /bsc/ or /bsc/KEY/extra: never a key, whatever the header says
        return None
    key = extract_key(match.get("key", ""), request.headers.get(hdrs.AUTHORIZATION))
    if key is BAD_KEY or not key or not well_formed(key):
        return None
    return key
