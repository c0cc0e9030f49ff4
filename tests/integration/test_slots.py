"""Slow bodies hold nothing shared: a request takes an
in-flight slot only once its whole body is read and its key has the right shape."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.app import create_app
from tests.helpers.config import Client, MakeConfig
from tests.helpers.doors import GatewayTestServer, both_doors, door_make_config  # noqa: F401

SLOTS = 4
ATTACKERS = 30  # far more than the slots


async def _stall(host: str, port: int, path: str) -> asyncio.StreamWriter:
    """A request head announcing 1000 bytes of body, then only 10 of them."""
    _, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n".encode()
        + b'{"jsonrpc"'
    )
    await writer.drain()
    return writer


async def test_slow_bodies_do_not_take_in_flight_slots(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str
) -> None:
    cfg = make_config({"limits": {"max_in_flight": SLOTS}, "server": {"body_timeout_s": 60}})
    client: Client = await aiohttp_client(GatewayTestServer(create_app(cfg)))
    host, port = client.host, client.port
    assert port is not None
    paths = ["/bsc", "/bsc/" + "A" * 32, f"/bsc/{api_key}", "/opbnb/x"]
    writers = await asyncio.gather(
        *(_stall(host, port, paths[i % len(paths)]) for i in range(ATTACKERS))
    )
    try:
        await asyncio.sleep(0.3)  # every stalled request is now inside the handler
        started = time.perf_counter()
        resp = await asyncio.wait_for(
            client.post(
                f"/bsc/{api_key}",
                json={"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"},
            ),
            timeout=5,
        )
        elapsed = time.perf_counter() - started
        assert resp.status == 200
        assert (await resp.json())["id"] == 1
        assert elapsed < 1.0, elapsed
    finally:
        for writer in writers:
            writer.close()
