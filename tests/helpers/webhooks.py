"""A webhook receiver for the alerts tests: a real aiohttp server on port 0 that checks
each delivery's ``X-Gateway-Signature`` with the endpoint's secret, as a key holder's
own receiver would, refusing a timestamp older than five minutes.

It keeps what it accepted (``got``) and what it refused (``refused``); ``answers``
is the status it gives each next delivery in turn (then ``final``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.helpers.waiting import eventually

TOLERANCE_S = 300


def signed_ok(secret: str, header: str, body: bytes, now: float | None = None) -> bool:
    """The receiver's check, written from the docs (not gateway.alerts.signing)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t = parts.get("t", "")
    if not t.isdigit() or abs((time.time() if now is None else now) - int(t)) > TOLERANCE_S:
        return False
    want = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts.get("v1", ""))


@dataclass
class Receiver:
    url: str = ""
    secret: str = ""
    answers: list[int] = field(default_factory=list)
    final: int = 200
    got: list[dict[str, Any]] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)  # time.time() of each accepted one
    refused: list[str] = field(default_factory=list)
    tries: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.tries += 1
        if not signed_ok(self.secret, request.headers.get("X-Gateway-Signature", ""), body):
            self.refused.append(request.headers.get("X-Gateway-Signature", ""))
            return web.Response(status=400, text="bad signature")
        status = self.answers.pop(0) if self.answers else self.final
        if 200 <= status < 300:
            self.got.append(orjson.loads(body))
            self.seen_at.append(time.time())
        return web.Response(status=status)

    async def wait_for(self, n: int, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        await eventually(lambda: len(self.got) >= n, timeout_s, f"{n} deliveries", 0.05)
        return self.got


@asynccontextmanager
async def receiver(path: str = "/hook") -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1, port 0; set ``secret`` once the webhook exists."""
    rec = Receiver()
    app = web.Application()
    app.router.add_post(path, rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rec.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield rec
    finally:
        await runner.cleanup()
