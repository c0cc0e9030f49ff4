"""No WebSocket node reachable: a subscribe is answered at once, not after the timeout.

A subscribe waits for the node inside the pipeline's in-flight slot; with
every node refusing sockets, waiting out ``ws.upstream_request_timeout_s``
(10 s by default) for each one let a few sockets hold a worker's slots.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from gateway.redis.embedded import free_port
from tests.helpers.wsstack import WsStack, chains, http, rpc, stack, ws_config, ws_nodes

__all__ = ["chains", "http", "stack", "ws_config", "ws_nodes"]  # the fixtures used


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
            assert answer["error"]["data"] == "no node accepted the subscription"
            assert took < 3.0, took  # the timeout is 10 s
        # the socket stays usable for plain calls
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 9, "method": "eth_chainId"})
        assert answer["result"] == "0x38"
