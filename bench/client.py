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

from gateway.demo.framing import ResponseFramer

__all__ = ["ClientConn", "Response", "ResponseParser", "build_request", "classify"]


@dataclass(slots=True)
class Response:
    """The parts of a response the harness looks at."""

    status: int
    body: bytes
    retry_after: bool  # a Retry-After header was present
    close: bool  # the server will close the connection after this response


class ResponseParser(ResponseFramer[Response]):
    """Incremental HTTP/1.1 response parser: Content-Length, chunked and
    read-until-close bodies, with the framing the mock node uses
    (gateway/demo/framing.py)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(Response)


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
