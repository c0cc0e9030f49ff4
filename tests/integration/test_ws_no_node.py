"""No WebSocket node reachable: a subscribe is answered at once, not after the timeout.

A subscribe waits for the node inside the pipeline's in-flight slot; with
every node refusing sockets, waiting out ``ws.upstream_request_timeout_s``
(10 s by default) for each one let a few sockets hold a worker's slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.redis.embedded import free_port
from tests.helpers.config import MakeConfig
from tests.helpers.served import served
from tests.helpers.wsstack import WsStack, eventually, rpc


@pytest.fixture
def ws_raw() -> dict[str, Any]:  # this module's override of wsstack's fixture
    closed = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    return {
        "networks": {"bsc": {"ws_upstreams": [closed, closed]}},
        "ws": {"reconnect_delay_s": 0.05},
    }


async def test_a_subscribe_with_every_node_refusing_is_answered_promptly(
    stack: WsStack,
    http: aiohttp.ClientSession,
    api_key: str,
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        for i in range(3):
            started = time.monotonic()
            answer = await rpc(
                ws, {"jsonrpc": "2.0", "id": i, "method": "eth_subscribe", "params": ["newHeads"]}
            )
            took = time.monotonic() - started
            assert answer["id"] == i and answer["error"]["code"] == -32603, answer
            # in words that say what is missing, not "Upstream timeout"
            reason = answer["error"]["data"]["reason"]
            assert answer["error"]["message"] == f"Upstream unavailable: {reason}", answer
            assert reason.startswith("no WebSocket upstream: "), answer
            assert took < 3.0, took  # the timeout is 10 s
        # the socket stays usable for plain calls
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 9, "method": "eth_chainId"})
        assert answer["result"] == "0x38"
    # and /readyz says so after the subscribers gave up (degraded, still ready)
    async with http.get(f"{stack.http}/readyz") as resp:
        body = await resp.json()
    assert resp.status == 200 and body["networks"]["bsc"]["websocket"] == "no WebSocket upstream"
    assert body["degraded"] == ["bsc: no WebSocket upstream"], body


class _NoSocketNode:
    """An HTTP server that answers every WebSocket handshake 404, counting the tries."""

    def __init__(self) -> None:
        self.tries = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.tries += 1
        return web.Response(status=404, text="no websocket here")


async def _quiet(node: _NoSocketNode, quiet_s: float, wait_s: float = 20.0) -> int:
    """The try count once it has not changed for ``quiet_s`` (fails after ``wait_s``)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    last, since = node.tries, loop.time()
    while loop.time() < end:
        await asyncio.sleep(0.1)
        if node.tries != last:
            last, since = node.tries, loop.time()
        elif loop.time() - since >= quiet_s:
            return last
    raise AssertionError(f"the link kept retrying: {node.tries} tries")


@pytest.fixture
async def no_socket_node() -> AsyncIterator[tuple[_NoSocketNode, str]]:
    node = _NoSocketNode()
    app = web.Application()
    app.router.add_get("/{tail:.*}", node.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield node, f"ws://127.0.0.1:{port}/v1/secrettoken123"
    finally:
        await runner.cleanup()


async def test_the_link_stops_retrying_once_the_last_subscriber_left(
    make_config: MakeConfig,
    no_socket_node: tuple[_NoSocketNode, str],
    http: aiohttp.ClientSession,
    api_key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node, url = no_socket_node
    cfg = make_config(
        {"networks": {"bsc": {"ws_upstreams": [url]}}, "ws": {"reconnect_delay_s": 0.05}}
    )
    caplog.set_level(logging.WARNING, logger="gateway.ws.fanout")
    async with served(cfg) as srv:
        async with http.ws_connect(f"ws{srv.url[4:]}/bsc/{api_key}") as ws:
            sub = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
            answer = await rpc(ws, sub)
            assert answer["error"]["code"] == -32603, answer
        await eventually(lambda: node.tries >= 1)
        # An attempt in flight when the subscriber left may still finish; after
        # that, nothing: the retry delay is 0.05 s (0.8 s at most with backoff),
        # so a link still retrying never stays quiet for 1.5 s, let alone 3 s more.
        settled = await _quiet(node, 1.5)
        await asyncio.sleep(3.0)
        assert node.tries == settled, (settled, node.tries)
    lines = [r.getMessage() for r in caplog.records if "ws node unreachable" in r.getMessage()]
    assert lines, "no failure line"
    assert "url=ws://127.0.0.1:" in lines[0] and "/v1/***" in lines[0], lines[0]
    assert "secrettoken123" not in lines[0]
    assert "error=WSServerHandshakeError: 404" in lines[0], lines[0]
