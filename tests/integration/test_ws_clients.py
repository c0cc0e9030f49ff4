"""Real client libraries against the gateway: web3.py's AsyncWeb3(WebSocketProvider)
(binary frames) and ethers v6 WebSocketProvider (Node.js), key in path and in header."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually

# web3 raises the interpreter's recursion limit to 100,000 on import; with it,
# the stdlib JSON parser overflows the C stack (a segfault, not a
# RecursionError) on deeply nested input elsewhere in the same test session.
_RECURSION_LIMIT = sys.getrecursionlimit()
from web3 import AsyncWeb3, WebSocketProvider  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

JS = Path(__file__).parents[1] / "js"


@pytest.mark.parametrize("where", ["path", "header"])
async def test_web3py_calls_and_subscriptions(stack: WsStack, api_key: str, where: str) -> None:
    chain = stack.chains["bsc"]
    if where == "path":
        provider = WebSocketProvider(f"{stack.ws}/bsc/{api_key}")
    else:
        provider = WebSocketProvider(
            f"{stack.ws}/bsc",
            websocket_kwargs={"additional_headers": {"Authorization": f"Bearer {api_key}"}},
        )
    async with AsyncWeb3(provider) as w3:
        assert await w3.eth.chain_id == 56
        assert await w3.eth.block_number == chain.head
        sub_id = await w3.eth.subscribe("newHeads")
        start = chain.head + 1

        async def mine() -> None:
            for _ in range(3):
                await asyncio.sleep(0.05)
                chain.mine()

        miner = asyncio.create_task(mine())
        numbers: list[int] = []
        async for payload in w3.socket.process_subscriptions():
            assert payload["subscription"] == sub_id
            numbers.append(payload["result"]["number"])
            if len(numbers) == 3:
                break
        await miner
        assert numbers == [start, start + 1, start + 2]
        assert await w3.eth.unsubscribe(sub_id) is True


def _node_ready() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "ethers").is_dir()


@pytest.mark.skipif(not _node_ready(), reason="npm install --prefix tests/js has not run")
@pytest.mark.parametrize("where", ["path", "header"])
async def test_ethers_v6_websocket_provider(stack: WsStack, api_key: str, where: str) -> None:
    chain = stack.chains["bsc"]
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "ethers_ws.mjs"),
        stack.ws + "/bsc",
        api_key,
        where,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None

    async def line() -> dict[str, Any]:
        assert proc.stdout is not None
        raw = await asyncio.wait_for(proc.stdout.readline(), 15)
        assert raw, "ethers script ended early"
        return dict(json.loads(raw))

    try:
        ready = await line()
        assert ready == {"chainId": 56, "blockNumber": chain.head}
        svc = stack.app[WS]
        await eventually(lambda: any(sess.subs for sess in svc.sessions), wait_s=10)
        start = chain.head + 1
        for _ in range(3):
            chain.mine()
            await asyncio.sleep(0.05)
        seen = [await line() for _ in range(3)]
        assert [s["block"] for s in seen] == [start, start + 1, start + 2]
        done = await line()
        assert done == {"done": True}
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_importing_web3_here_leaves_the_recursion_limit_alone() -> None:
    assert sys.getrecursionlimit() == _RECURSION_LIMIT
