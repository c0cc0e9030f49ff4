"""The shortest end-to-end path: a keyed call answered by the mock node."""

from __future__ import annotations

from typing import Any

from tests.helpers.config import Client

BLOCK = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}


async def test_keyed_call_reaches_node(client: Client, api_key: str, mock_nodes: Any) -> None:
    resp = await client.post(f"/bsc/{api_key}", json=BLOCK)
    assert resp.status == 200
    body = await resp.json()
    assert body["id"] == 1 and body["result"].startswith("0x")
    assert mock_nodes["bsc"].by_method["eth_blockNumber"] >= 1
