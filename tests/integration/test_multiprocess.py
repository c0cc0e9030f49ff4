"""Several gateway processes, one key, a burst sent at once: exactly N admitted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.demo.mocknode import MockNode
from gateway.redis.embedded import free_port
from gateway.store.accounts import Store

BURST = 40
PROCESSES = 3


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"gateway on port {port} did not start")


@pytest.fixture
def gateways(
    tmp_path: Path, redis_url: str, prefix: str, mock_nodes: dict[str, MockNode]
) -> Iterator[list[int]]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        f'[redis]\nprefix = "{prefix}"\n'
        f"[plans.free]\nrate = 0.001\nburst = {BURST}\n"
        f'[networks.bsc]\nupstreams = ["{mock_nodes["bsc"].url}"]\n'
        f'[networks.opbnb]\nupstreams = ["{mock_nodes["opbnb"].url}"]\n'
        "[server]\naccess_log = false\n"
        # every admitted call must reach the node: the test counts them
        "[cache]\nenabled = false\ncoalesce = false\n"
    )
    env = {**os.environ, "GATEWAY_REDIS_URL": redis_url, "GATEWAY_CONFIG": str(cfg)}
    ports = [free_port() for _ in range(PROCESSES)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(p)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    try:
        for port, proc in zip(ports, procs, strict=True):
            _wait_ready(port, proc)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)


async def test_burst_across_processes_admits_exactly_the_bucket(
    gateways: list[int], store: Store, account: str, mock_nodes: dict[str, MockNode]
) -> None:
    key, _ = await store.create_key(account)
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'
    sent = BURST * 3
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> int:
            port = gateways[i % len(gateways)]
            async with session.post(
                f"http://127.0.0.1:{port}/bsc/{key}",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                await resp.read()
                return resp.status

        statuses: list[Any] = await asyncio.gather(*(one(i) for i in range(sent)))
    assert statuses.count(200) == BURST
    assert statuses.count(429) == sent - BURST
    assert mock_nodes["bsc"].by_method["eth_chainId"] == BURST
