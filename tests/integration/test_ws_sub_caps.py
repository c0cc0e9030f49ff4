"""Subscription caps hold under concurrency, and the small doors
of the socket: a frame that is not a request gets an answer,
an upgrade to a path without a key gets 401 -32001.

The race: the per-socket cap used to count only subscriptions already
attached, so 30 concurrent frames of distinct ``logs`` filters each passed
it while their node round trips were in flight (600 live node
subscriptions on one socket, cap 100). Slots are now taken before the
node is awaited, and distinct upstream subscriptions are also capped per
key and per network.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.store.accounts import Store
from tests.helpers.wsstack import WsStack, eventually

SOCKET_CAP = 5
KEY_CAP = 8
NET_CAP = 12


@pytest.fixture
def ws_raw() -> dict[str, Any]:
    return {
        "plans": {"free": {"rate": 100_000, "burst": 100_000}},
        "ws": {
            "max_subscriptions_per_socket": SOCKET_CAP,
            "max_upstream_subscriptions_per_key": KEY_CAP,
            "max_upstream_subscriptions_per_network": NET_CAP,
        },
    }


def _logs_batch(start: int, n: int) -> bytes:
    """A batch of ``n`` subscriptions, each to a distinct logs filter."""
    calls = [
        {
            "jsonrpc": "2.0",
            "id": start + i,
            "method": "eth_subscribe",
            "params": ["logs", {"address": "0x" + f"{start + i:040x}"}],
        }
        for i in range(n)
    ]
    return orjson.dumps(calls)


async def _answers(ws: aiohttp.ClientWebSocketResponse, frames: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while frames:
        msg = await ws.receive(timeout=10)
        obj = orjson.loads(msg.data)
        if isinstance(obj, dict) and obj.get("method") == "eth_subscription":
            continue
        out.extend(obj if isinstance(obj, list) else [obj])
        frames -= 1
    return out


async def _flood(ws: aiohttp.ClientWebSocketResponse, base: int) -> list[dict[str, Any]]:
    """30 frames of 3 distinct logs subscriptions each, all sent before any answer."""
    await asyncio.gather(*(ws.send_bytes(_logs_batch(base + 3 * f, 3)) for f in range(30)))
    return await _answers(ws, 30)


async def test_concurrent_frames_cannot_pass_the_socket_cap(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    node = stack.nodes["bsc"][0]
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        answers = await _flood(ws, 1000)
        granted = [a for a in answers if "result" in a]
        refused = [a for a in answers if "error" in a]
        assert len(granted) == SOCKET_CAP
        assert len(refused) == 90 - SOCKET_CAP
        assert {a["error"]["code"] for a in refused} == {-32005}
        assert "per socket" in refused[0]["error"]["data"]["reason"]
        await eventually(lambda: node.subscriptions("logs") <= SOCKET_CAP)
    await eventually(lambda: node.subscriptions("logs") == 0)


async def test_distinct_upstream_subscriptions_are_capped_per_key_and_network(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str, store: Store, account: str
) -> None:
    node = stack.nodes["bsc"][0]
    url = f"{stack.ws}/bsc/{api_key}"
    async with http.ws_connect(url) as a, http.ws_connect(url) as b:
        first, second = await asyncio.gather(_flood(a, 1000), _flood(b, 5000))
        granted = [x for x in first + second if "result" in x]
        assert len(granted) == KEY_CAP  # two sockets of 5 each, but 8 per key
        reasons = {x["error"]["data"]["reason"] for x in first + second if "error" in x}
        assert f"at most {KEY_CAP} distinct subscriptions per key" in reasons
        other, _ = await store.create_key(account, name="other")
        async with http.ws_connect(f"{stack.ws}/bsc/{other}") as c:
            third = await _flood(c, 9000)
        granted_c = [x for x in third if "result" in x]
        assert len(granted_c) == NET_CAP - KEY_CAP  # the network's cap is reached first
        assert any("on this network" in x["error"]["data"]["reason"] for x in third if "error" in x)
        await eventually(lambda: node.subscriptions("logs") <= NET_CAP)


@pytest.mark.parametrize("frame", [b"nope", b'"text"', b"42", b"[]", b"[1]", b"{}"])
async def test_a_frame_that_is_not_a_request_is_answered_with_id_null(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str, frame: bytes
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_bytes(frame)
        answer = orjson.loads((await ws.receive(timeout=5)).data)
        first = answer[0] if isinstance(answer, list) else answer
        assert first["id"] is None
        assert first["error"]["code"] in (-32700, -32600)
        await ws.send_bytes(b'{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}')
        assert orjson.loads((await ws.receive(timeout=5)).data)["result"] == "0x38"


@pytest.mark.parametrize("path", ["/bsc/", "/bsc/{key}/extra", "/opbnb/a/b"])
async def test_an_upgrade_to_a_path_without_a_key_is_401(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str, path: str
) -> None:
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Authorization": f"Bearer {api_key}",
    }
    async with http.get(stack.http + path.format(key=api_key), headers=headers) as resp:
        assert resp.status == 401
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        assert orjson.loads(await resp.read()) == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001, "message": "Invalid authentication credentials"},
        }
