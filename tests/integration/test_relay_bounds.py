"""Bounded relay on every transport and every answer shape.

RSS is measured on a real gateway process (``gateway serve``) while clients
that never read ask for answers of hundreds of megabytes:

* over HTTP, a 200 MB answer that is valid JSON but not in geth's compact
  layout (spaces after ``:``, or the id as its last member, as Nethermind
  writes it): it used to be buffered whole (+400 to +1,000 MB);
* over WebSocket, four sockets asking for a 100 MB ``eth_getLogs`` each:
  answers used to be read whole and queued (RSS 55 -> 800 MB). Now each goes
  out as one fragmented message, a piece at a time as the client reads, and
  a socket that does not drain within ``server.write_timeout_s`` is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.demo.mocknode import MockNodeOptions, start_mock_node
from gateway.redis.embedded import LOOPBACK, RedisProcess, free_port
from gateway.store.accounts import Store
from tests.helpers.procs import stop, wait_ready

pytestmark = pytest.mark.slow

BOUND_MB = 64


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _peak_growth(pid: int, seconds: float) -> float:
    """MB the process grew by at its peak over ``seconds`` (sampled every 0.1 s)."""
    before = peak = _rss(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.1)
        peak = max(peak, _rss(pid))
    return (peak - before) / 2**20


def _gateway(
    tmp_path: Path, redis_url: str, prefix: str, upstream: str, extra: str = ""
) -> tuple[subprocess.Popen[bytes], int]:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        f'[redis]\nprefix = "{prefix}"\n'
        f'[networks.bsc]\nupstreams = ["{upstream}"]\n'
        f'[networks.opbnb]\nupstreams = ["{upstream}"]\n'
        "[plans.free]\nrate = 1000\nburst = 1000\n"
        f"[server]\naccess_log = false\n{extra}"
        "[upstream]\nprobe_interval_s = 60\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--host", LOOPBACK, "--port", str(port)],
        env={**os.environ, "GATEWAY_CONFIG": str(cfg), "GATEWAY_REDIS_URL": redis_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, port


@pytest.fixture
async def key(redis: Any) -> tuple[str, str]:
    prefix = "rb" + secrets.token_hex(4)
    store = Store(redis, prefix=prefix)
    account = await store.create_account("relay@example.com", "correct horse battery")
    api_key, _ = await store.create_key(account.id)
    return prefix, api_key


# -- HTTP: answers not in geth's compact layout ----------------------------------
SHAPES = {
    "spaced": (b'{"jsonrpc": "2.0", "id": %d, "result": "0x', b'"}'),
    "id-last": (b'{"jsonrpc":"2.0","result":"0x', b'", "id": %d}'),
}


@pytest.fixture
async def spaced_node(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A node whose 200 MB ``eth_call`` answers have the given shape (chunked).

    Everything else (the health probes) is answered by a mock node behind it.
    """
    head, tail = SHAPES[request.param]
    plain = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
    http = aiohttp.ClientSession()

    async def answer(req: web.Request) -> web.StreamResponse:
        body = await req.read()
        call = orjson.loads(body)
        if type(call) is not dict or call.get("method") != "eth_call":
            async with http.post(plain.url, data=body) as up:
                return web.Response(body=await up.read(), content_type="application/json")
        gid = call["id"]
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(req)
        await resp.write(head % gid if b"%d" in head else head)
        piece = b"ab" * 32768
        for _ in range(200 * 2**20 // len(piece)):
            await resp.write(piece)
        await resp.write(tail % gid if b"%d" in tail else tail)
        return resp

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, LOOPBACK, 0).start()
    yield f"http://{LOOPBACK}:{runner.addresses[0][1]}/"
    await runner.cleanup()
    await http.close()
    await plain.close()


@pytest.mark.parametrize("spaced_node", list(SHAPES), indirect=True)
async def test_a_200mb_answer_in_another_layout_to_a_client_that_never_reads(
    redis_server: RedisProcess, tmp_path: Path, key: tuple[str, str], spaced_node: str
) -> None:
    prefix, api_key = key
    proc, port = _gateway(tmp_path, redis_server.url, prefix, spaced_node)
    writer: asyncio.StreamWriter | None = None
    try:
        await asyncio.to_thread(wait_ready, port, proc)
        call = b'{"jsonrpc":"2.0","id":"\\u00e9","method":"eth_call","params":[]}'
        reader, writer = await asyncio.open_connection(LOOPBACK, port, limit=2**16)
        writer.write(
            f"POST /bsc/{api_key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(call)}\r\n\r\n".encode()
            + call
        )
        head = await asyncio.wait_for(reader.readexactly(600), 10)
        assert b" 200 OK" in head
        assert b'\r\n{"jsonrpc":"2.0","id":"\\u00e9","result":' in head  # the client's id
        cast(asyncio.Transport, writer.transport).pause_reading()  # never reads again
        grown = await _peak_growth(proc.pid, 6)
        print(f"HTTP never-reading client: RSS +{grown:.1f} MB")
        assert grown < BOUND_MB
        assert proc.poll() is None
    finally:
        if writer is not None:
            writer.transport.abort()
        stop(proc)


# -- WebSocket: four sockets that never read, 100 MB each ------------------------
def _masked_text(payload: bytes) -> bytes:
    """One client frame (clients must mask), text, FIN."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes((0x81, 0x80 | size)) if size < 126 else bytes((0x81, 0xFE)) + size.to_bytes(2)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def _silent_socket(
    port: int, api_key: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a socket, ask for 100 MB of logs, and stop reading."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port, limit=2**16)
    nonce = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET /bsc/{api_key} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {nonce}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    assert b" 101 " in await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    call = b'{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{}]}'
    writer.write(_masked_text(call))
    first = await asyncio.wait_for(reader.readexactly(2), 10)
    assert first[0] == 0x01  # a text frame without FIN: the first piece of the answer
    cast(asyncio.Transport, writer.transport).pause_reading()
    return reader, writer


async def test_four_websockets_that_never_read_hold_bounded_memory(
    redis_server: RedisProcess, tmp_path: Path, key: tuple[str, str]
) -> None:
    prefix, api_key = key
    node = await start_mock_node(
        MockNodeOptions(chain_id=56, block_time_s=0, result_bytes=100 * 2**20)
    )
    proc, port = _gateway(tmp_path, redis_server.url, prefix, node.url, "write_timeout_s = 4.0\n")
    sockets: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        await asyncio.to_thread(wait_ready, port, proc)
        before = _rss(proc.pid)
        sockets = [await _silent_socket(port, api_key) for _ in range(4)]
        grown = await _peak_growth(proc.pid, 3)
        grown = max(grown, (_rss(proc.pid) - before) / 2**20)
        print(f"4 never-reading sockets: RSS +{grown:.1f} MB")
        assert grown < BOUND_MB
        # past server.write_timeout_s without draining, each socket is dropped
        await asyncio.sleep(3)
        assert proc.poll() is None
        received = 0
        async with asyncio.timeout(20):
            for reader, writer in sockets:
                cast(asyncio.Transport, writer.transport).resume_reading()
                try:
                    while chunk := await reader.read(2**20):
                        received += len(chunk)
                except ConnectionError:
                    pass
        assert received < 4 * 100 * 2**20  # cut off, not delivered whole
    finally:
        for _, writer in sockets:
            writer.transport.abort()
        stop(proc)
        await node.close()
