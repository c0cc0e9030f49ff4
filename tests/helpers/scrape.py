"""Read ``/metrics`` the way Prometheus does: from the metrics listener, not the public port."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.ops.metricsport import MetricsListener
from gateway.telemetry.metrics import Metrics

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


async def by_node(metrics: Metrics, name: str) -> dict[str, float]:
    """The samples of the metric ``name`` (a per-node gauge or counter), by node label."""
    _, _, text = await scrape(metrics)
    return {
        s.labels["node"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }
