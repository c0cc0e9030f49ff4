"""WebSocket upgrade, auth and calls through the real gateway (SPEC §9)."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from tests.helpers.wsstack import WsStack, chains, http, rpc, stack, ws_config, ws_nodes, ws_raw

__all__ = ["chains", "http", "stack", "ws_config", "ws_nodes", "ws_raw"]


async def test_path_key_upgrades_and_calls_work(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        answer = await rpc(ws, {"jsonrpc": "2.0", "id": 7, "method": "eth_chainId"})
        assert answer == {"jsonrpc": "2.0", "id": 7, "result": "0x38"}
