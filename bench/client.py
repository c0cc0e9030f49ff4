"""A lean HTTP/1.1 keep-alive client: just enough to load a JSON-RPC server.

Why not aiohttp's client: the load generator must cost much less CPU per
request than the server under test.  Measured with ``python -m
bench.micro.nodeclient`` on the reference machine (README, "Client cost"), this
protocol needs about 23 µs of CPU per request, an ``aiohttp.ClientSession``
doing the same keep-alive POSTs 100-130 µs.  One request is in flight per
connection (no pipelining), as with real clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ClientConn", "Response", "ResponseParser", "build_request", "classify"]


@dataclass(slots=True)
class Response:
    """The parts of a response the harness looks at."""

    status: int
    body: bytes
    retry_after: bool  # a Retry-After header was present
    close: bool  # the server will close the connection after this response


class ResponseParser:
    """Incremental HTTP/1.1 response parser for Content-Length, chunked and
    read-until-close bodies."""

    __slots__ = ("_buf", "_head")

    def __init__(self) -> None:
        self._buf = bytearray()
        # status, retry_after, close, content-length (-1 chunked, -2 until EOF), body start
        self._head: tuple[int, bool, bool, int, int] | None = None

    def feed(self, data: bytes) -> list[Response]:
        """Add bytes; return every response completed by them."""
        self._buf += data
        out: list[Response] = []
        while True:
            resp = self._next()
            if resp is None:
                return out
            out.append(resp)

    def eof(self) -> Response | None:
        """The connection closed: complete a read-until-close body, if any."""
        head = self._head
        if head is None or head[3] != -2:
            return None
        status, retry_after, _, _, start = head
        body = bytes(self._buf[start:])
        self._buf.clear()
        self._head = None
        return Response(status, body, retry_after, True)

    def _next(self) -> Response | None:
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return None
            self._head = (*_parse_head(bytes(buf[:end])), end + 4)
        status, retry_after, close, length, start = self._head
        if length == -2:
            return None
        if length == -1:
            decoded = _dechunk(buf, start)
            if decoded is None:
                return None
            body, consumed = decoded
        else:
            if len(buf) < start + length:
                return None
            body, consumed = bytes(buf[start : start + length]), start + length
        del buf[:consumed]
        self._head = None
        return Response(status, body, retry_after, close)


def _parse_head(head: bytes) -> tuple[int, bool, bool, int]:
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12:
        raise ValueError(f"bad status line {status_line[:40]!r}")
    status = int(status_line[9:12])
    close = status_line[:8] == b"HTTP/1.0"
    retry_after = False
    length = -2
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            length = -1
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
        elif name == b"retry-after":
            retry_after = True
    if status == 204 or status == 304 or 100 <= status < 200:
        length = 0
    return status, retry_after, close, length


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n", pos)
            while end > pos:  # skip trailer lines
                pos = end + 2
                end = buf.find(b"\r\n", pos)
            return None if end < 0 else (bytes(out), end + 2)
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2


def classify(resp: Response) -> str:
    """Kind of outcome: ok, rpc_error (2xx carrying a JSON-RPC error), http_<status>."""
    if 200 <= resp.status < 300:
        return "rpc_error" if b'"error":' in resp.body else "ok"
    return f"http_{resp.status}"


def build_request(
    host: str,
    port: int,
    path: str,
    body: bytes,
    *,
    bearer: str | None = None,
    extra_headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """Pre-serialised POST request; built once, written many times."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if bearer is not None:
        lines.append(f"Authorization: Bearer {bearer}")
    lines.extend(f"{k}: {v}" for k, v in extra_headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ClientConn(asyncio.Protocol):
    """One keep-alive connection; reports responses and loss by callback.

    Callbacks rather than futures keep the per-request cost down; the owner
    (the load generator) tracks what is in flight on each connection.
    """

    def __init__(
        self,
        on_response: Callable[[ClientConn, Response], None],
        on_lost: Callable[[ClientConn], None],
    ) -> None:
        self.transport: asyncio.Transport | None = None
        self.inflight: tuple[int, float, float] | None = None  # seq, intended, sent
        self._parser = ResponseParser()
        self._on_response = on_response
        self._on_lost = on_lost
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            responses = self._parser.feed(data)
        except ValueError:
            self.abort()
            return
        for resp in responses:
            self._on_response(self, resp)

    def eof_received(self) -> bool | None:
        resp = self._parser.eof()
        if resp is not None:
            self._on_response(self, resp)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._on_lost(self)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
