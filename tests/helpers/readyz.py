"""/readyz with the details (every node, the Redis address), as the metrics listener serves it.

The public port's /readyz tells ready or not and nothing of what is behind the
gateway; tests that look at a node's error or URL read this view instead,
from a real ``MetricsListener`` on a free loopback port in front of ``app``.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from gateway.ops.metricsport import MetricsListener
from gateway.telemetry.metrics import METRICS


async def readyz_details(app: web.Application, path: str = "/readyz") -> tuple[int, Any]:
    """GET ``path`` on a metrics listener serving ``app``'s details: (status, JSON body)."""
    listener = MetricsListener(app[METRICS], "127.0.0.1:0", details=app)
    await listener.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{listener.port}{path}") as resp,
        ):
            return resp.status, await resp.json()
    finally:
        await listener.close()
