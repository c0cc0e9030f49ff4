"""The bench ``ws`` scenario runs end to end (tiny: a few sockets for two seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.waiting import eventually


def test_bench_ws_scenario_smoke(tmp_path: Path) -> None:
    out = tmp_path / "ws.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "ws", "--sockets", "20", "--procs", "1"),
            *("--rate", "5", "--duration", "2", "--json", str(out)),
            *("--max-p99-ms", "5000"),  # a busy test machine: the smoke run judges delivery
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
    assert report["gateway CPU per delivered notification (µs)"] > 0
    assert report["gateway peak RSS (MB)"] >= report["gateway RSS with sockets (MB)"] > 0
    assert report["verdict"]["pass"] is True
    if len(os.sched_getaffinity(0)) >= 2:
        assert report["pinning"].startswith("server on CPU")


def test_open_files_limit_is_raised_not_lowered() -> None:
    """The run raises the soft limit towards what the sockets need, never past the hard."""
    import resource

    from bench.scenarios.ws import fd_budget, raise_nofile

    assert fd_budget(10_000, 4) == 10_000 + 256  # the gateway holds every socket
    soft0, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft0, 512), hard))
        soft, hard2 = raise_nofile(2000)
        assert hard2 == hard
        assert soft == min(2000, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raise_nofile(100)[0] == soft  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft0, hard))


def test_a_run_the_limit_cannot_hold_stops_with_a_reason() -> None:
    """More sockets than the hard open-files limit: exit 2-style message, no traceback."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 10**7:
        return  # nothing this machine would refuse
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "ws", "--sockets", str(hard + 1), "--procs", "1"],
        capture_output=True, timeout=60, check=False, text=True,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "open files" in proc.stderr and "Traceback" not in proc.stderr


async def test_demo_nodes_mine_and_answer() -> None:

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
        await eventually(
            lambda: all(node.chain.head > starts[name] for name, node in nodes.items()),
            5.0,
            "both chains to mine",
        )
    finally:
        for node in nodes.values():
            await node.close()
            await node.chain.stop()
