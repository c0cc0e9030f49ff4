"""Fixtures for WebSocket tests: mock chains whose nodes speak HTTP and WebSocket,
and the real gateway (``GatewayRunner``, real Redis) pointed at them.

tests/conftest.py loads this module as a pytest plugin, so a test asks for
these fixtures by name and imports only the helpers (``WsStack``, ``rpc``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.config import Config
from gateway.demo.mockws import Chain, MockWsNode, start_ws_node
from tests.helpers.config import MakeConfig
from tests.helpers.served import served


@dataclass
class WsStack:
    """The gateway's base URLs and app, and the mock nodes behind it."""

    http: str
    ws: str
    app: web.Application
    chains: dict[str, Chain]
    nodes: dict[str, list[MockWsNode]]


@pytest.fixture
async def chains() -> AsyncIterator[dict[str, Chain]]:
    out = {"bsc": Chain(56), "opbnb": Chain(204, start_block=5_000_000)}
    yield out
    for chain in out.values():
        await chain.stop()


@pytest.fixture
async def ws_nodes(chains: dict[str, Chain]) -> AsyncIterator[dict[str, list[MockWsNode]]]:
    """Two nodes for bsc (failover), one for opbnb."""
    nodes = {
        "bsc": [await start_ws_node(chains["bsc"]), await start_ws_node(chains["bsc"])],
        "opbnb": [await start_ws_node(chains["opbnb"])],
    }
    yield nodes
    for group in nodes.values():
        for node in group:
            await node.close()


@pytest.fixture
def ws_raw() -> dict[str, Any]:
    """TOML-shaped overrides a test module may replace (e.g. ``{"ws": {...}}``)."""
    return {}


@pytest.fixture
def ws_config(
    make_config: MakeConfig, ws_nodes: dict[str, list[MockWsNode]], ws_raw: dict[str, Any]
) -> Config:
    raw = dict(ws_raw)
    # The gateway's own head subscriptions (upstream.ws_heads) would be counted with the
    # client subscriptions these tests count on the nodes; test_head_follow covers them.
    raw["upstream"] = {"ws_heads": False, **raw.get("upstream", {})}
    return make_config(
        raw, upstreams={name: [n.url for n in group] for name, group in ws_nodes.items()}
    )


@pytest.fixture
async def stack(
    ws_config: Config, chains: dict[str, Chain], ws_nodes: dict[str, list[MockWsNode]]
) -> AsyncIterator[WsStack]:
    async with served(ws_config) as srv:
        yield WsStack(srv.url, "ws" + srv.url[len("http") :], srv.app, chains, ws_nodes)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def rpc(ws: aiohttp.ClientWebSocketResponse, msg: Any, wait_s: float = 5.0) -> Any:
    """Send one call or batch and return the next non-notification frame, parsed."""
    await ws.send_bytes(orjson.dumps(msg))
    while True:
        frame = await asyncio.wait_for(ws.receive(), wait_s)
        assert frame.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), frame
        obj = orjson.loads(frame.data)
        if isinstance(obj, dict) and obj.get("method") == "eth_subscription":
            continue
        return obj


async def notes(
    ws: aiohttp.ClientWebSocketResponse, count: int, wait_s: float = 5.0
) -> list[dict[str, Any]]:
    """The next ``count`` notifications (fails on anything else or on a timeout)."""
    out: list[dict[str, Any]] = []
    while len(out) < count:
        frame = await asyncio.wait_for(ws.receive(), wait_s)
        assert frame.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), frame
        obj = orjson.loads(frame.data)
        assert obj.get("method") == "eth_subscription", obj
        out.append(obj)
    return out


async def eventually(check: Callable[[], bool | Awaitable[bool]], wait_s: float = 5.0) -> None:
    """Poll ``check`` until it holds (asserting at the end), for state set by other tasks."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
