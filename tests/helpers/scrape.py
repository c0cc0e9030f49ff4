"""Read ``/metrics`` the way Prometheus does: from the metrics listener, not the public port."""

from __future__ import annotations

import aiohttp

from gateway.ops.metrics import Metrics
from gateway.ops.metricsport import MetricsListener

HOST = "127.0.0.1"


async def scrape(metrics: Metrics) -> tuple[int, str, str]:
    """(status, content type, text) of ``GET /metrics`` on a listener for ``metrics``."""
    listener = MetricsListener(metrics, f"{HOST}:0")
    await listener.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{HOST}:{listener.port}/metrics") as resp,
        ):
            return resp.status, resp.headers["Content-Type"], await resp.text()
    finally:
        await listener.close()
