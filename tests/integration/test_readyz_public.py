"""/readyz on the public port says ready or not and nothing of what is behind it.

Anyone can reach the public port, so its /readyz names no node URL, no Redis
address and no node error (which may name a host); the metrics listener
(private) serves the same paths with those details. A network whose nodes
take no WebSocket is shown as degraded ("no WebSocket upstream"): plain calls
work, every subscription would fail.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import aiohttp

from gateway.demo.mocknode import MockNode
from tests.helpers.config import MakeConfig
from tests.helpers.served import served
from tests.helpers.wsstack import WsStack, eventually, rpc


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, Any]:
    async with session.get(url) as resp:
        text = await resp.text()
        return resp.status, text, await resp.json()


async def test_public_readyz_names_no_address_the_metrics_listener_does(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], redis_url: str
) -> None:
    cfg = make_config({"server": {"metrics_listen": "127.0.0.1:0"}})
    hidden = [node.url.split("//", 1)[1] for node in mock_nodes.values()]
    where = urlsplit(redis_url)
    hidden.append(where.netloc or where.path)  # host:port, or the unix socket's path
    async with served(cfg) as srv, aiohttp.ClientSession() as session:
        assert srv.runner.metrics_listener is not None
        private = f"http://127.0.0.1:{srv.runner.metrics_listener.port}"
        for path in ("/readyz", "/readyz/bsc"):
            status, text, body = await _get(session, srv.url + path)
            assert status == 200 and body["ready"] is True, body
            for secret in hidden:
                assert secret not in text, (path, secret, text)
            assert "upstreams" not in body and "upstreams" not in body.get("networks", {}).get(
                "bsc", {}
            )
        status, text, body = await _get(session, private + "/readyz")
        assert status == 200
        assert body["networks"]["bsc"]["upstreams"][0]["url"] == mock_nodes["bsc"].url
        assert body["redis"]["address"]
        status, _, body = await _get(session, private + "/readyz/bsc")
        assert status == 200 and body["upstreams"][0]["url"] == mock_nodes["bsc"].url
        # the metrics listener serves /metrics as before
        async with session.get(private + "/metrics") as resp:
            assert resp.status == 200


async def test_http_only_nodes_show_as_no_websocket_upstream(make_config: MakeConfig) -> None:
    """The mock nodes speak HTTP only; their derived ws:// URLs refuse the handshake."""
    cfg = make_config({"upstream": {"ws_heads": True}})
    async with served(cfg) as srv, aiohttp.ClientSession() as session:
        seen: dict[str, Any] = {}

        async def degraded() -> bool:
            status, _, body = await _get(session, srv.url + "/readyz")
            seen.update(body)
            return status == 200 and "bsc: no WebSocket upstream" in body["degraded"]

        await eventually(degraded, wait_s=20)
        assert seen["ready"] is True  # HTTP still serves: degraded, not unready
        assert seen["networks"]["bsc"]["websocket"] == "no WebSocket upstream"


async def test_websocket_state_untried_then_ok(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    _, _, body = await _get(http, stack.http + "/readyz/bsc")
    assert body["websocket"] == "untried", body  # nothing subscribed, heads polled
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        sub = await rpc(
            ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
        )
        assert isinstance(sub["result"], str), sub
        _, _, body = await _get(http, stack.http + "/readyz")
        assert body["networks"]["bsc"]["websocket"] == "ok" and body["degraded"] == [], body
