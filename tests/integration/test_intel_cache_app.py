"""The answer cache through the real app: what it merges, and the memory it holds.

Real app, real Redis, real mock nodes on real ports. A cache hit never
reaches the node, so the node's call count tells a hit from a miss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mocknode import MockNode
from tests.helpers.config import MakeConfig

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
ROOMY = {"free": {"rate": 1_000_000, "burst": 1_000_000}}


async def _app(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], raw: dict[str, Any] | None = None
) -> Client:
    cfg = make_config({"plans": ROOMY, "upstream": {"probe_interval_s": 60}, **(raw or {})})
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    for pool in client.app[T.POOLS].values():
        await pool.probe_once()  # heads known: head-keyed answers are cached
    return client


async def _call(client: Client, key: str, method: str, params: Any, id_: Any = 1) -> Any:
    body = orjson.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
    resp = await client.post(f"/bsc/{key}", data=body, headers=JSON)
    assert resp.status == 200, await resp.text()
    return orjson.loads(await resp.read())


async def test_a_0X_prefix_is_not_answered_from_the_0x_entry(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    mock_nodes: dict[str, MockNode],
    api_key: str,
) -> None:
    client = await _app(make_config, aiohttp_client)
    node = mock_nodes["bsc"]
    digits = "f39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    asked = node.by_method["eth_getBalance"]
    first = await _call(client, api_key, "eth_getBalance", ["0x" + digits, "latest"])
    assert "result" in first and node.by_method["eth_getBalance"] == asked + 1
    # the digits' case is the same request: a hit, the node is not asked
    again = await _call(client, api_key, "eth_getBalance", ["0x" + digits.upper(), "latest"], 2)
    assert again["result"] == first["result"] and node.by_method["eth_getBalance"] == asked + 1
    # a 0X prefix is a request the node judges itself (many refuse it): asked again
    await _call(client, api_key, "eth_getBalance", ["0X" + digits, "latest"], 3)
    assert node.by_method["eth_getBalance"] == asked + 2
    # and two member orders of keys a Go node folds alike are two requests
    asked = node.by_method["eth_call"]
    await _call(client, api_key, "eth_call", [{"to": "0x" + digits, "To": "0x" + "00" * 20}])
    await _call(client, api_key, "eth_call", [{"To": "0x" + "00" * 20, "to": "0x" + digits}])
    assert node.by_method["eth_call"] == asked + 2
