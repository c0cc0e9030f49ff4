"""Filter answers hold bounded memory on both transports.

RSS of a real gateway process (``gateway serve``) while clients that never
read ask for ``eth_getFilterLogs`` of a node answer of 13 MB each: six over
HTTP, four over WebSocket. Before, the filter service read the node's whole
answer, parsed it, re-encoded it and wrote it as one buffer: the same six
HTTP clients took the process +216 MB while ``eth_getLogs`` on the same range
took +8 MB. Now the answer goes through the same bounded relay as
``eth_getLogs``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import aiohttp
import orjson
import pytest

from gateway.demo.mocknode import MockNodeOptions, start_mock_node
from gateway.redis.embedded import LOOPBACK, RedisProcess
from tests.helpers.procs import stop, wait_ready
from tests.integration import test_relay_bounds as _rb
from tests.integration.test_relay_bounds import BOUND_MB, _gateway, _masked_text, _peak_growth

pytestmark = pytest.mark.slow

key = _rb.key  # the fixture: a prefix and an API key in the test Redis


async def _silent_http(port: int, api_key: str, fid: str) -> asyncio.StreamWriter:
    call = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getFilterLogs", "params": [fid]})
    reader, writer = await asyncio.open_connection(LOOPBACK, port, limit=2**16)
    writer.write(
        f"POST /bsc/{api_key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(call)}\r\n\r\n".encode()
        + call
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
    assert b" 200 OK" in head, head
    body = await asyncio.wait_for(reader.readexactly(64), 20)
    assert b'{"jsonrpc":"2.0","id":1,"result":"0x' in body, body  # the logs, not an error
    cast(asyncio.Transport, writer.transport).pause_reading()  # never reads again
    return writer


async def _silent_socket(port: int, api_key: str, fid: str) -> asyncio.StreamWriter:
    reader, writer = await asyncio.open_connection(LOOPBACK, port, limit=2**16)
    writer.write(
        f"GET /bsc/{api_key} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    assert b" 101 " in await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    call = {"jsonrpc": "2.0", "id": 1, "method": "eth_getFilterLogs", "params": [fid]}
    writer.write(_masked_text(orjson.dumps(call)))
    await asyncio.wait_for(reader.readexactly(2), 20)  # the answer's first frame began
    cast(asyncio.Transport, writer.transport).pause_reading()
    return writer


async def test_filter_logs_to_clients_that_never_read_hold_bounded_memory(
    redis_server: RedisProcess, tmp_path: Path, key: tuple[str, str]
) -> None:
    prefix, api_key = key
    node = await start_mock_node(
        MockNodeOptions(chain_id=56, block_time_s=0, result_bytes=13 * 2**20)
    )
    proc, port = _gateway(tmp_path, redis_server.url, prefix, node.url, "write_timeout_s = 30.0\n")
    writers: list[asyncio.StreamWriter] = []
    try:
        await asyncio.to_thread(wait_ready, port, proc)
        url = f"http://{LOOPBACK}:{port}/bsc/{api_key}"
        async with aiohttp.ClientSession() as http:
            made = {"jsonrpc": "2.0", "id": 1, "method": "eth_newFilter", "params": [{}]}
            async with http.post(url, json=made) as resp:
                fid = (await resp.json())["result"]
        await asyncio.sleep(0.5)  # let start-up allocations settle before measuring
        before = _rb._rss(proc.pid)
        for _ in range(6):
            writers.append(await _silent_http(port, api_key, fid))
        grown = await _peak_growth(proc.pid, 2)
        grown = max(grown, (_rb._rss(proc.pid) - before) / 2**20)
        print(f"6 HTTP never-reading filter clients: RSS +{grown:.1f} MB")
        assert grown < BOUND_MB
        for _ in range(4):
            writers.append(await _silent_socket(port, api_key, fid))
        grown = await _peak_growth(proc.pid, 2)
        grown = max(grown, (_rb._rss(proc.pid) - before) / 2**20)
        print(f"and 4 WebSocket ones: RSS +{grown:.1f} MB")
        assert grown < BOUND_MB
        assert proc.poll() is None
    finally:
        for writer in writers:
            writer.transport.abort()
        stop(proc)
        await node.close()
