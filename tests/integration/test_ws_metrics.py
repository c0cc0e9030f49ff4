"""WebSocket metrics: sockets by network, subscriptions by kind, upstream subscriptions,
notifications sent, disconnect reasons (on the /metrics text)."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.metrics import METRICS
from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually, notes, rpc


def _samples(stack: WsStack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = stack.app[METRICS].exposition().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_ws_metrics(stack: WsStack, http: aiohttp.ClientSession, api_key: str) -> None:
    sockets = [await http.ws_connect(f"{stack.ws}/bsc/{api_key}") for _ in range(3)]
    op = await http.ws_connect(f"{stack.ws}/opbnb/{api_key}")
    for ws in sockets:
        await rpc(
            ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
        )
    await rpc(op, {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["logs", {}]})
    s = _samples(stack)
    assert s[("gateway_ws_sockets", (("network", "bsc"),))] == 3
    assert s[("gateway_ws_sockets", (("network", "opbnb"),))] == 1
    assert s[("gateway_ws_subscriptions", (("kind", "newHeads"),))] == 3
    assert s[("gateway_ws_subscriptions", (("kind", "logs"),))] == 1
    assert s[("gateway_ws_upstream_subscriptions", (("network", "bsc"),))] == 1
    assert s[("gateway_ws_upstream_subscriptions", (("network", "opbnb"),))] == 1
    stack.chains["bsc"].mine(2)
    for ws in sockets:
        await notes(ws, 2)
    await stack.app[WS].charge_once()
    s = _samples(stack)
    assert s[("gateway_ws_notifications_total", (("network", "bsc"),))] == 6
    for ws in sockets:
        await ws.close()
    await eventually(lambda: len(stack.app[WS].sessions) == 1)
    s = _samples(stack)
    assert s[("gateway_ws_sockets", (("network", "bsc"),))] == 0
    assert s[("gateway_ws_subscriptions", (("kind", "newHeads"),))] == 0
    assert s[("gateway_ws_upstream_subscriptions", (("network", "bsc"),))] == 0
    assert s[("gateway_ws_disconnects_total", (("reason", "client"),))] == 3
    await op.close()
