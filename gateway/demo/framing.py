"""HTTP/1.1 framing for the test-side peers: the mock node's requests, the bench client's answers.

Both cut messages off a byte stream with one parser, llhttp (Node.js's),
through ``httptools``: one set of rules for heads, chunked bodies and
trailers, and one set of error codes, on both sides.

Why httptools and not aiohttp's own C parser (which ``upstream/nodeclient.py``
uses): aiohttp builds a URL, a header multidict and a ``StreamReader`` for
every message, about 3.9 µs per request on the reference machine. httptools
calls back per event and builds nothing, 0.6 µs per request and 0.7 µs per
response, so the test-side peers stay cheap next to the gateway they load.

Framers keep only what the peers look at, and hand finished messages back in
order, so pipelined requests and split reads need nothing from the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import httptools

__all__ = ["FramingError", "RequestFramer", "ResponseFramer"]

R = TypeVar("R")


class FramingError(ValueError):
    """The stream is not HTTP/1.x we accept; ``status`` is the answer it deserves."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class RequestFramer:
    """Cuts requests off a client's byte stream: ``feed`` → [(method, body, keep_alive)].

    Limits: a head over ``max_head`` bytes is 431, a body over ``max_body``
    bytes (declared or chunked) is 413, anything llhttp refuses is 400. A bad
    stream is not raised but kept in ``error``, so the requests before it in
    the same read are still answered; once it is set the stream is unusable:
    answer ``error.status`` and close.
    """

    __slots__ = (
        "_body",
        "_done",
        "_error",
        "_head_bytes",
        "_in_head",
        "_keep_alive",
        "_max_body",
        "_max_head",
        "_method",
        "_parser",
        "_size",
        "error",
    )

    def __init__(self, max_head: int, max_body: int) -> None:
        self._max_head = max_head
        self._max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._done: list[tuple[bytes, bytes, bool]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._head_bytes = 0
        self._in_head = False
        self._method = b""
        self._keep_alive = True
        self._error: FramingError | None = None
        self.error: FramingError | None = None

    def feed(self, data: bytes) -> list[tuple[bytes, bytes, bool]]:
        """Add bytes; return every request they complete, oldest first (see ``error``)."""
        if self.error is None:
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                pass  # no upgrades here: the request itself is complete
            except httptools.HttpParserError as exc:
                self.error = self._error or FramingError(400, f"bad HTTP: {exc}")
            else:
                if self._in_head:  # httptools buffers an unfinished head itself: bound it
                    self._head_bytes += len(data)
                    if self._head_bytes > self._max_head:
                        self.error = FramingError(431, "head over the limit")
        done, self._done = self._done, []
        return done

    # -- httptools callbacks (names fixed by httptools) ----------------------------
    def on_message_begin(self) -> None:
        self._in_head = True
        self._head_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if (
            len(name) == 14
            and name.lower() == b"content-length"
            and value.strip().isdigit()
            and int(value) > self._max_body
        ):
            self._fail(413, "declared body over the limit")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._method = self._parser.get_method()
        self._keep_alive = self._parser.should_keep_alive()

    def on_body(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._max_body:
            self._fail(413, "body over the limit")
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body, self._size = [], 0
        self._done.append((self._method, body, self._keep_alive))

    def _fail(self, status: int, reason: str) -> None:
        self._error = FramingError(status, reason)
        raise self._error


class ResponseFramer(Generic[R]):
    """Cuts responses off a server's byte stream, built by ``make(status, body, retry_after,
    close)``.

    A body delimited by the connection's end (no length, not chunked) is handed
    back by ``eof``. Anything llhttp refuses raises ``FramingError`` (a
    ``ValueError``).
    """

    __slots__ = (
        "_body",
        "_close",
        "_done",
        "_in_message",
        "_make",
        "_parser",
        "_retry_after",
        "_status",
        "_until_close",
    )

    def __init__(self, make: Callable[[int, bytes, bool, bool], R]) -> None:
        self._make = make
        self._parser = httptools.HttpResponseParser(self)
        self._done: list[R] = []
        self._body: list[bytes] = []
        self._status = 0
        self._retry_after = False
        self._until_close = True
        self._close = False
        self._in_message = False

    def feed(self, data: bytes) -> list[R]:
        """Add bytes; return every response they complete, oldest first."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise FramingError(502, f"bad HTTP: {exc}") from None
        done, self._done = self._done, []
        return done

    def eof(self) -> R | None:
        """The connection closed: complete a read-until-close body, if one is open."""
        if not (self._in_message and self._until_close and self._status):
            return None
        self._in_message = False
        body, self._body = b"".join(self._body), []
        return self._make(self._status, body, self._retry_after, True)

    # -- httptools callbacks (names fixed by httptools) ----------------------------
    def on_message_begin(self) -> None:
        self._in_message = True
        self._status = 0
        self._retry_after = False
        self._until_close = True

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._until_close = False
        elif lowered == b"retry-after":
            self._retry_after = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._close = not self._parser.should_keep_alive()

    def on_body(self, chunk: bytes) -> None:
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        self._in_message = False
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        self._done.append(self._make(self._status, body, self._retry_after, self._close))
