"""Several gateway processes, one key, a burst sent at once: exactly N admitted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.demo.mocknode import MockNode
from gateway.redis.embedded import free_port
from gateway.store.accounts import Store
from tests.helpers.config import scenario
from tests.helpers.procs import wait_ready

BURST = 40
PROCESSES = 3


@pytest.fixture
def started(
    tmp_path: Path, redis_url: str, prefix: str, mock_nodes: dict[str, MockNode]
) -> Iterator[tuple[list[int], list[subprocess.Popen[bytes]]]]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        scenario(
            "shared_burst",
            prefix=prefix,
            burst=BURST,
            bsc=mock_nodes["bsc"].url,
            opbnb=mock_nodes["opbnb"].url,
        )
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
        yield ports, procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)


@pytest.fixture
async def gateways(started: tuple[list[int], list[subprocess.Popen[bytes]]]) -> list[int]:
    ports, procs = started
    for port, proc in zip(ports, procs, strict=True):
        # in a thread: the mock nodes on this loop answer the start-up checks meanwhile
        await asyncio.to_thread(wait_ready, port, proc)
    return ports


@pytest.mark.slow
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
