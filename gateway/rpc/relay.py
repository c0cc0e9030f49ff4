"""A large single answer relayed in bounded pieces, with the client's id spliced in.

Transport-neutral: the HTTP adapter writes the pieces into a chunked (or
sized) response, the WebSocket adapter into one fragmented text message;
both wait for their socket to drain between pieces, so memory stays
bounded whatever the answer's size (a 200 MB answer to a client
that never reads adds < 64 MB).

The gateway id must become the client's without parsing the result. Three
shapes are relayed in pieces:

* geth's compact head ``{"jsonrpc":"2.0","id":N,`` (the common case);
* the same members with any whitespace or order (``{"id": N, "jsonrpc":
  "2.0", "result": ...``): the head is rewritten;
* the id as the last member (``{"jsonrpc":"2.0","result":...,"id":N}``, as
  Nethermind writes it): the id moves to the head, and the last bytes are
  held back until the end to check and drop the node's id.

Any other shape, and a batch's answer (it is parsed to put each id
back), is read whole up to ``limits.max_buffered_answer_bytes`` and
restored the slow way; past it, 502: an answer the gateway cannot relay
within its bound is refused, never buffered without limit.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.rpc import protocol as rpc
from gateway.upstream.errors import UpstreamError
from gateway.upstream.nodeclient import NodeStream

# Single answers longer than this (or of unknown length) are streamed, not
# buffered; the common small answer keeps the one-buffer path.
STREAM_OVER = 1 << 20
_PEEK = 512  # bytes read before the shape is judged
_HOLD = 256  # bytes held back in the id-last shape (the node's ``,"id":N}``)

_OPEN = re.compile(rb"\s*\{")
_MEMBER = re.compile(rb'\s*"(jsonrpc|id)"\s*:\s*("2\.0"|-?[0-9]+)\s*,')
_BODY = re.compile(rb'\s*"(result|error)"\s*:')
_TAIL = re.compile(rb',\s*"id"\s*:\s*(-?[0-9]+)\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z')


class Relay:
    """One node answer still arriving; ``start`` then ``rest``, or ``close``.

    ``length`` is the restored answer's size when known (a Content-Length),
    ``is_error`` whether the node answered with an error, ``whole`` whether
    ``start`` returned the complete answer (a shape read whole).
    """

    __slots__ = (
        "_hold",
        "buffer_limit",
        "client_id",
        "gid",
        "is_error",
        "length",
        "stream",
        "whole",
    )

    def __init__(self, stream: NodeStream, gid: int, client_id: Any, buffer_limit: int) -> None:
        self.stream = stream
        self.gid = gid
        self.client_id = client_id
        self.buffer_limit = buffer_limit
        self.length: int | None = None
        self.is_error = False
        self.whole = False
        self._hold: bytes | None = None  # id-last shape: the held-back tail

    async def start(self) -> bytes:
        """The first bytes to send (the client's id in them); raises UpstreamError/BadAnswer."""
        stream = self.stream
        first = b""
        while len(first) < _PEEK:
            chunk = await stream.read()
            if not chunk:
                break
            first += chunk
        id_json = orjson.dumps(self.client_id)
        new_head = b'{"jsonrpc":"2.0","id":%s,' % id_json
        compact = b'{"jsonrpc":"2.0","id":%d,' % self.gid
        if first.startswith(compact):
            self.is_error = first.startswith(b'"error"', len(compact))
            return self._sized(first, len(compact), new_head)
        shape = _loose_head(first)
        if shape is not None:
            end, node_id, body_key = shape
            self.is_error = body_key == b"error"
            head = new_head + b'"%s":' % body_key
            if node_id == self.gid:
                return self._sized(first, end, head)
            if node_id is None:  # the id comes last: checked at the end
                self._hold = b""
                return head + first[end:]
        whole = first + await self._read_bounded(len(first))
        body, self.is_error = rpc.restore_single(whole, self.gid, self.client_id)
        self.whole = True
        self.length = len(body)
        return body

    def _sized(self, first: bytes, cut: int, head: bytes) -> bytes:
        length = self.stream.length
        self.length = None if length is None else length - cut + len(head)
        return head + first[cut:]

    async def _read_bounded(self, have: int) -> bytes:
        return await read_bounded(self.stream, self.buffer_limit, have)

    async def rest(self) -> AsyncIterator[bytes]:
        """The remaining pieces, each at most what the node sent at once."""
        if self.whole:
            return
        read = self.stream.read
        if self._hold is None:
            while chunk := await read():
                yield chunk
            return
        held = b""
        while chunk := await read():
            held += chunk
            if len(held) > _HOLD:
                yield held[:-_HOLD]
                held = held[-_HOLD:]
        match = _TAIL.search(held)
        if match is None or int(match.group(1)) != self.gid:
            raise rpc.BadAnswer("answer does not end with the id sent")
        yield held[: match.start()] + b"}"

    def close(self) -> None:
        """No-op once read to the end; drops a half-read node answer."""
        self.stream.close()


async def read_bounded(
    stream: NodeStream, limit: int, have: int = 0, deadline_s: float | None = None
) -> bytes:
    """The rest of an answer that must be held whole (a batch, an odd layout), up to ``limit``.

    Past it, ``UpstreamError`` (502): an answer the gateway cannot relay in
    pieces is refused rather than held without bound. ``deadline_s`` bounds the
    whole read (504 past it): each read has its own timeout, but a node that
    trickles bytes would otherwise hold the caller (and its in-flight slot).
    """
    parts = []
    try:
        async with asyncio.timeout(deadline_s):
            while chunk := await stream.read():
                have += len(chunk)
                if have > limit:
                    raise UpstreamError(
                        "answer that cannot be relayed in pieces is over "
                        "limits.max_buffered_answer_bytes",
                        too_large=True,
                    )
                parts.append(chunk)
    except TimeoutError:
        raise UpstreamError("answer not read whole in time", timeout=True) from None
    finally:
        stream.close()  # no-op once read to the end
    return b"".join(parts)


def _loose_head(first: bytes) -> tuple[int, int | None, bytes] | None:
    """(end of the head, the node's id or None, b"result"/b"error") of a spaced-out head."""
    match = _OPEN.match(first)
    if match is None:
        return None
    pos = match.end()
    node_id: int | None = None
    for _ in range(2):
        member = _MEMBER.match(first, pos)
        if member is None:
            break
        name, value = member.group(1), member.group(2)
        if name == b"id":
            if value.startswith(b'"') or node_id is not None:
                return None
            node_id = int(value)
        elif value != b'"2.0"':
            return None
        pos = member.end()
    body = _BODY.match(first, pos)
    if body is None:
        return None
    return body.end(), node_id, body.group(1)
