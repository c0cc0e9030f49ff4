"""The demo's webhook receiver: a loopback HTTP server that checks each alert's
signature and prints it, so ``gateway serve --demo`` shows an alert firing.

It checks ``X-Gateway-Signature`` the way a key holder's receiver would
(HMAC-SHA256 of ``"<t>.<body>"`` with the webhook's secret, at most five
minutes old), written out here rather than imported, as docs/ALERTS.md shows.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

TOLERANCE_S = 300


def signature_ok(secret: str, header: str, body: bytes, now: float | None = None) -> bool:
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    stamp = fields.get("t", "")
    if not stamp.isdigit() or abs((time.time() if now is None else now) - int(stamp)) > TOLERANCE_S:
        return False
    want = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, fields.get("v1", ""))


@dataclass
class AlertSink:
    """Listening on 127.0.0.1 (port 0) once started; ``secret`` is set when the webhook exists."""

    show: Callable[[str], None] = print
    url: str = ""
    secret: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/alerts", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/alerts"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        header = request.headers.get("X-Gateway-Signature", "")
        if not signature_ok(self.secret, header, body):
            self.show("demo webhook: refused a delivery with a bad signature")
            return web.Response(status=400)
        self.show(f"demo webhook: alert received, signature ok: {body.decode(errors='replace')}")
        return web.Response(status=204)
