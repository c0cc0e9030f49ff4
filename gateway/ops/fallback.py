"""What the public port answers where no route matched: ``/favicon.ico`` and a JSON 404.

A client with a wrong URL (``/eth/KEY``, ``/v1/bsc``) is almost always a
JSON-RPC library, which cannot read aiohttp's text ``404: Not Found``; it
gets a JSON-RPC error body instead (``"id": null``: no call was read), with
the networks' paths in ``error.data``. No CORS headers: only the RPC paths
are open to every origin (a browser dapp with a wrong URL sees a CORS
failure; its developer sees the 404 in the network tab). Browsers ask every host for
``/favicon.ico``; it gets a small icon rather than a 404 in every log.

``setup_fallback_routes`` must run after every other route is added (the
catch-all matches whatever is left). A known path asked with another method
then answers this 404 too, not 405: only the RPC paths promise a 405.
"""

from __future__ import annotations

import struct
from typing import Final

import orjson
from aiohttp import web

from gateway import typedefs as T

_HEADERS: Final = {"Cache-Control": "no-store"}


def _icon() -> bytes:
    """A 16x16 ICO (one 32-bit BMP image): an amber disc on transparent."""
    size = 16
    pixels = bytearray()
    for y in range(size):  # BMP rows run bottom-up; the disc is symmetric anyway
        for x in range(size):
            inside = (x - 7.5) ** 2 + (y - 7.5) ** 2 <= 7.0**2
            pixels += bytes((0x0B, 0xB9, 0xF0, 0xFF)) if inside else bytes(4)  # BGRA
    mask = bytes(size * 4)  # the AND mask: 16 rows of 32 bits (alpha decides)
    header = struct.pack("<IiiHHIIiiII", 40, size, size * 2, 1, 32, 0, 0, 0, 0, 0, 0)
    image = header + bytes(pixels) + mask
    entry = struct.pack("<BBBBHHII", size, size, 0, 0, 1, 32, len(image), 6 + 16)
    return struct.pack("<HHH", 0, 1, 1) + entry + image


ICON: Final = _icon()


async def favicon(request: web.Request) -> web.Response:
    return web.Response(
        body=ICON, content_type="image/x-icon", headers={"Cache-Control": "max-age=86400"}
    )


async def not_found(request: web.Request) -> web.Response:
    """404 with a JSON-RPC error body naming the paths that exist."""
    paths = [net.prefix for net in request.app[T.CONFIG].networks]
    reason = f"no JSON-RPC endpoint at this path; the networks are {', '.join(paths)}"
    body = {  # as rpc.errors.error_obj words it (ops may not import rpc)
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": f"Invalid Request: {reason}",
            "data": {"reason": reason},
        },
    }
    return web.Response(
        body=orjson.dumps(body), status=404, content_type="application/json", headers=_HEADERS
    )


def setup_fallback_routes(app: web.Application) -> None:
    """``/favicon.ico``, then the catch-all 404 (call it after every other route)."""
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_route("*", "/{tail:.*}", not_found)
