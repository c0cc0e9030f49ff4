"""A key over its notification budget, seen through ethers v6's WebSocketProvider.

docs/WEBSOCKET.md promises that dropped notifications are never silent: the
socket's next call answers -32005 with the count. This runs the real ethers
against the real gateway with a tiny plan, so the promise about what ethers
does with that answer is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from gateway.telemetry.metrics import METRICS
from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually
from tests.integration.test_ws_clients import JS, _node_ready


@pytest.fixture
def ws_raw() -> dict[str, Any]:  # a plan the blocks below run over
    return {"plans": {"free": {"rate": 2, "burst": 5}}, "ws": {"charge_interval_s": 0.05}}


@pytest.mark.skipif(not _node_ready(), reason="npm install --prefix tests/js has not run")
async def test_ethers_sees_dropped_notifications_as_an_error_and_keeps_going(
    stack: WsStack, api_key: str
) -> None:
    """What docs/WEBSOCKET.md promises of ethers v6: the call after the drops rejects
    with the gateway's -32005 (the count in its data); the provider stays usable."""
    chain = stack.chains["bsc"]
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "ethers_budget.mjs"),
        f"{stack.ws}/bsc/{api_key}",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def ask() -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"call\n")
        await proc.stdin.drain()
        raw = await asyncio.wait_for(proc.stdout.readline(), 15)
        assert raw, "ethers script ended early"
        return dict(json.loads(raw))

    registry = stack.app[METRICS].registry

    def dropped() -> float:
        value = registry.get_sample_value(
            "gateway_ws_notifications_dropped_total", {"reason": "budget"}
        )
        return value or 0.0

    try:
        raw = await asyncio.wait_for(proc.stdout.readline(), 15)
        assert json.loads(raw) == {"ready": True}, raw
        svc = stack.app[WS]
        await eventually(lambda: any(sess.subs for sess in svc.sessions), wait_s=10)
        for _ in range(30):  # far past the test plan's burst: delivery stops
            chain.mine()
            await asyncio.sleep(0.06)
        await eventually(lambda: dropped() > 0)
        settled = -1.0
        while dropped() != settled:  # the last blocks' notifications reach the fan-out late
            settled = dropped()
            await asyncio.sleep(0.5)
        told = await ask()
        assert told["error"]["code"] == -32005, told
        assert told["error"]["data"]["dropped_notifications"] == dropped(), told
        for _ in range(40):  # the same provider works once the bucket refills
            later = await ask()
            if "result" in later:
                break
            assert "dropped_notifications" not in str(later), later  # told once
            await asyncio.sleep(0.25)
        assert int(later["result"], 16) == chain.head, later
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
