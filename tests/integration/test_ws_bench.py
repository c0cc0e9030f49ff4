"""The bench ``ws`` scenario runs end to end (tiny: a few sockets for two seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_ws_scenario_smoke(tmp_path: Path) -> None:
    out = tmp_path / "ws.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "bench.scenarios.ws", "--sockets", "20", "--procs", "1"),
            *("--rate", "5", "--duration", "2", "--json", str(out)),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    report = json.loads(out.read_text())
    assert report["sockets opened"] == 20
    assert report["upstream subscriptions held"] == 1
    assert report["blocks"] >= 5
    assert (
        report["notifications received"]
        == report["notifications expected"]
        == 20 * report["blocks"]
    )
    assert report["latency p99 (ms)"] > 0


async def test_demo_nodes_mine_and_answer() -> None:
    import asyncio

    import aiohttp

    from gateway.demo.mockws import start_demo_nodes

    nodes = await start_demo_nodes(block_time_s=0.05)
    try:
        starts = {name: node.chain.head for name, node in nodes.items()}
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(nodes["bsc"].ws_url) as ws:
                await ws.send_json(
                    {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
                )
                assert (await ws.receive_json(timeout=5))["result"].startswith("0x")
                note = await ws.receive_json(timeout=5)
                assert note["method"] == "eth_subscription"
            body = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}
            async with http.post(nodes["opbnb"].url + "/", json=body) as resp:
                assert (await resp.json())["result"] == "0xcc"
        await asyncio.sleep(0.2)
        assert all(node.chain.head > starts[name] for name, node in nodes.items())
    finally:
        for node in nodes.values():
            await node.close()
            await node.chain.stop()
