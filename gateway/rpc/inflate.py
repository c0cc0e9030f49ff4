"""Reading a request body, inflated in bounded slices when it is compressed.

aiohttp inflates a ``Content-Encoding: gzip`` body inside its parser, on the
event loop, as the bytes arrive, and reads a refused body to its end: about
1 MB of gzip that inflates to 1 GB held a worker for 1.5 s per upload and
froze every other client of it. Both doors therefore run aiohttp with
``auto_decompress=False`` (``server.listener.GatewayRunner``) and read the
raw body here:

* the raw (compressed) bytes are bounded by ``limits.max_body_bytes``;
* a ``gzip`` / ``x-gzip`` / ``deflate`` body is inflated with
  ``zlib.decompressobj`` at most ``SLICE`` bytes of output at a time,
  yielding to the loop between slices, so one body holds the loop for one
  slice (tens of microseconds), never for the whole body;
* the inflated size is bounded by ``limits.max_body_bytes`` too, and by
  ``limits.max_inflate_ratio`` times the compressed bytes consumed (checked
  once the output passes ``RATIO_FLOOR``, since short JSON compresses far);
* ``br``, ``zstd``, stacked codings and anything else are refused before
  the body is read (``coding_refused``): zlib bounds its output per call, and
  the gateway takes no decoder it cannot bound the same way.

A refusal raises ``BodyRefused`` and stops reading: the rest of the body
stays unread, and the doors close the connection after the answer.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Final

from aiohttp.streams import StreamReader

SLICE: Final = 64 * 1024  # inflated bytes per step between yields to the loop
RATIO_FLOOR: Final = 64 * 1024  # inflated bytes before the ratio is checked
TAKEN: Final = "gzip, deflate"  # what a 415 for a coding names in Accept-Encoding
_MISMATCH: Final = "body does not match its Content-Encoding"

_WBITS: Final = {
    "identity": 0,
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,  # zlib-wrapped; raw deflate is detected below
}


class BodyRefused(Exception):
    """The body is not read further: ``too_large`` (413) or else malformed (400)."""

    def __init__(self, reason: str, *, too_large: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


def coding_refused(header: str | None) -> bool:
    """True for a ``Content-Encoding`` the gateway does not inflate (answered 415)."""
    return header is not None and header.strip().lower() not in _WBITS


async def read_body(stream: StreamReader, coding: str | None, limit: int, ratio: int) -> bytes:
    """The whole body, inflated; ``BodyRefused`` as soon as a bound is passed.

    ``coding`` must have passed ``coding_refused``. ``ConnectionError`` and
    whatever the stream raises when its connection goes propagate.
    """
    wbits = _WBITS[coding.strip().lower()] if coding is not None else 0
    stream.set_read_chunk_size(min(limit, 1 << 20))  # fewer pause/resume cycles, as aiohttp's
    if not wbits:
        return await _read_plain(stream, limit)
    return await _read_inflated(stream, wbits, limit, ratio)


async def _read_plain(stream: StreamReader, limit: int) -> bytes:
    body = bytearray()
    while chunk := await stream.readany():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


async def _read_inflated(stream: StreamReader, wbits: int, limit: int, ratio: int) -> bytes:
    inflater: zlib._Decompress | None = None
    out = bytearray()
    consumed = 0  # compressed bytes handed to zlib so far
    while chunk := await stream.readany():
        if inflater is None:
            inflater = zlib.decompressobj(_detect(wbits, chunk))
        elif inflater.eof:
            raise BodyRefused("data after the end of the compressed body", too_large=False)
        consumed += len(chunk)
        if consumed > limit:
            raise _too_large(limit)
        data = chunk
        while data:  # a tail is left only when a slice filled: progress each turn
            try:
                out += inflater.decompress(data, SLICE)
            except zlib.error:
                raise BodyRefused(_MISMATCH, too_large=False) from None
            data = inflater.unconsumed_tail
            if len(out) > limit:
                raise _too_large(limit)
            used = consumed - len(data)
            if len(out) > RATIO_FLOOR and len(out) > ratio * used:
                reason = f"body inflates past {ratio} times its compressed size"
                raise BodyRefused(reason, too_large=True)
            if inflater.eof:
                if inflater.unused_data:
                    raise BodyRefused("data after the end of the compressed body", too_large=False)
                break
            if data:
                await asyncio.sleep(0)  # one slice at a time: other clients run between
    if inflater is None:
        return b""  # an empty body, whatever it says it is coded with
    if not inflater.eof:
        raise BodyRefused("compressed body ends early", too_large=False)
    return bytes(out)


def _detect(wbits: int, first: bytes) -> int:
    """``deflate`` as sent by some clients is raw deflate, with no zlib header."""
    if wbits != zlib.MAX_WBITS or len(first) < 2:
        return wbits
    zlib_header = (first[0] & 0x0F) == 8 and ((first[0] << 8) | first[1]) % 31 == 0
    return wbits if zlib_header else -zlib.MAX_WBITS


def _too_large(limit: int) -> BodyRefused:
    return BodyRefused(f"body exceeds {limit} bytes", too_large=True)
