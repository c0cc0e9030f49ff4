"""Large and hostile node answers: a cap, a
streamed relay with bounded memory, and clients that stop reading or leave."""

from __future__ import annotations

import asyncio
import logging
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

from gateway.app import create_app
from gateway.config import DEFAULT_METHODS, NetworkConfig, UpstreamConfig
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import LOOPBACK, RedisProcess, free_port
from gateway.rpc.protocol import validate_call
from gateway.rpc.reads import Reads
from gateway.rpc.relay import STREAM_OVER, Relay
from gateway.store.accounts import Store
from gateway.upstream.pool import NodePool
from gateway.upstream.transport import LeanTransport
from tests.helpers.config import Client, MakeConfig
from tests.helpers.doors import GatewayTestServer, both_doors, door_make_config  # noqa: F401
from tests.helpers.probes import PROBE_BODY
from tests.helpers.procs import stop, wait_ready
from tests.helpers.waiting import eventually

JSON = {"Content-Type": "application/json"}
BIG_ID = b"18446744073709551616"
CALL = b'{"jsonrpc":"2.0","id":' + BIG_ID + b',"method":"eth_call","params":[]}'


PROBE_ANSWER = (
    b'[{"jsonrpc":"2.0","id":1,"result":{"number":"0x10","hash":"0xaa"}},'
    b'{"jsonrpc":"2.0","id":"gateway-chain-check","result":"0x38"}]'
)


async def _node(**options: Any) -> MockNode:
    return await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0, **options))


@pytest.fixture
async def big_node() -> AsyncIterator[MockNode]:
    node = await _node(result_bytes=3 * STREAM_OVER)
    yield node
    await node.close()


async def _client(
    make_config: MakeConfig, aiohttp_client: Any, node: MockNode, **raw: Any
) -> Client:
    cfg = make_config(raw, upstreams={"bsc": [node.url]})
    client: Client = await aiohttp_client(GatewayTestServer(create_app(cfg)))
    return client


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])
async def test_answer_over_the_cap_is_502(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, big_node: MockNode, transport: str
) -> None:
    client = await _client(
        make_config,
        aiohttp_client,
        big_node,
        limits={"max_response_bytes": STREAM_OVER},
        upstream={"client": transport},
    )
    resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
    assert resp.status == 502
    assert await resp.read() == (
        b'{"jsonrpc":"2.0","id":' + BIG_ID + b',"error":{"code":-32603,'
        b'"message":"Upstream unavailable"}}'
    )
    # one node's oversize answer is not tried again elsewhere
    assert big_node.by_method["eth_call"] == 1


async def test_chunked_answer_over_the_cap_is_cut_off(
    make_config: MakeConfig,
    aiohttp_client: Any,
    api_key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No Content-Length to refuse it by: the cap holds while the bytes arrive.

    A single call's answer is already streaming when the cap is passed, so the
    client's connection is cut (its HTTP framing says the answer is
    incomplete); a batch is buffered, so it gets a 502.
    """

    async def endless(request: web.Request) -> web.StreamResponse:
        if await request.read() == PROBE_BODY:  # the health check: a good node of chain 56
            return web.Response(body=PROBE_ANSWER, content_type="application/json")
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b'{"jsonrpc":"2.0","id":1,"result":"0x')
        for _ in range(64):
            await resp.write(b"ab" * 32768)
        await resp.write(b'"}')
        return resp

    app = web.Application()
    app.router.add_post("/", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        cfg = make_config(
            {"limits": {"max_response_bytes": 1_000_000}},
            upstreams={"bsc": [f"http://{LOOPBACK}:{port}/"]},
        )
        client: Client = await aiohttp_client(GatewayTestServer(create_app(cfg)))
        resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
        resp = await client.post(f"/bsc/{api_key}", data=b"[" + CALL + b"]", headers=JSON)
        assert resp.status == 502, await resp.read()
        assert not [
            r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("gateway")
        ]
    finally:
        await runner.cleanup()


async def test_large_answer_is_streamed_with_the_client_id(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, big_node: MockNode
) -> None:
    client = await _client(make_config, aiohttp_client, big_node)
    resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "RateLimit" in resp.headers
    body = await resp.read()
    assert int(resp.headers["Content-Length"]) == len(body)
    assert body.startswith(b'{"jsonrpc":"2.0","id":' + BIG_ID + b',"result":"0xabab')
    assert len(orjson.loads(body)["result"]) == 2 + 2 * (3 * STREAM_OVER // 2)
    # the node connection went back to the pool: the next call reuses it
    resp = await client.post(f"/bsc/{api_key}", data=CALL, headers=JSON)
    assert resp.status == 200 and len(await resp.read()) == len(body)


@pytest.mark.slow
async def test_client_leaving_mid_answer_releases_everything(
    make_config: MakeConfig,
    aiohttp_client: Any,
    api_key: str,
    big_node: MockNode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    big_node.options = MockNodeOptions(chain_id=56, block_time_s=0, result_bytes=64 * STREAM_OVER)
    client = await _client(make_config, aiohttp_client, big_node, limits={"max_in_flight": 1})
    assert client.port is not None
    for _ in range(3):
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(
            f"POST /bsc/{api_key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(CALL)}\r\n\r\n".encode()
            + CALL
        )
        await reader.readexactly(4096)  # the answer has started
        writer.transport.abort()
    big_node.options = MockNodeOptions(chain_id=56, block_time_s=0)
    resp = await asyncio.wait_for(client.post(f"/bsc/{api_key}", data=CALL, headers=JSON), 5)
    assert resp.status == 200  # the one slot is free, the pool still works
    assert not [
        r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("gateway")
    ]


# -- memory: a 200 MB answer to a client that never reads ---------------------------
def _rss(pid: int) -> int:
    """Resident set size of a process in bytes (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.slow
async def test_big_answer_to_a_client_that_never_reads_holds_little_memory(
    redis_server: RedisProcess, tmp_path: Path, redis: Any
) -> None:
    node = await _node(result_bytes=200 * 1024 * 1024)
    prefix = "rs" + secrets.token_hex(4)
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        f'[redis]\nprefix = "{prefix}"\n'
        f'[networks.bsc]\nupstreams = ["{node.url}"]\n'
        f'[networks.opbnb]\nupstreams = ["{node.url}"]\n'
        "[server]\naccess_log = false\n[upstream]\nprobe_interval_s = 60\n"
    )
    store = Store(redis, prefix=prefix)
    account = await store.create_account("rss@example.com", "correct horse battery")
    key, _ = await store.create_key(account.id)
    port = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before any load
        [sys.executable, "-m", "gateway", "serve", "--host", LOOPBACK, "--port", str(port)],
        env={
            **os.environ,
            "GATEWAY_CONFIG": str(cfg),
            "GATEWAY_REDIS_URL": redis_server.url,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    writer: asyncio.StreamWriter | None = None
    try:
        await asyncio.to_thread(wait_ready, port, proc)
        before = _rss(proc.pid)
        _, writer = await asyncio.open_connection(LOOPBACK, port, limit=2**16)
        writer.write(
            f"POST /bsc/{key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(CALL)}\r\n\r\n".encode()
            + CALL
        )
        cast(asyncio.Transport, writer.transport).pause_reading()  # this client never reads
        peak = before
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            peak = max(peak, _rss(proc.pid))
        grown_mb = (peak - before) / 2**20
        print(f"RSS before {before / 2**20:.1f} MB, peak {peak / 2**20:.1f} MB (+{grown_mb:.1f})")
        assert grown_mb < 64, grown_mb
        assert proc.poll() is None
    finally:
        if writer is not None:
            writer.transport.abort()
        stop(proc)
        await node.close()


async def test_a_coalesced_large_answer_whose_owner_left_is_not_held() -> None:
    """The first caller of a coalesced read owns a streamed answer; if it is cancelled
    (a WebSocket closed mid-call), the node connection is dropped, not held forever,
    and the caller that joined it still gets its answer (asked on its own)."""
    node = await _node(result_bytes=3 * STREAM_OVER, latency_ms=300, spare_probes=True)
    net = NetworkConfig(
        name="bsc",
        prefix="/bsc",
        chain_id=56,
        upstreams=(node.url,),
        methods=frozenset(DEFAULT_METHODS),
    )
    pool = NodePool(net, UpstreamConfig(), 0.5, 5.0)
    await pool.start()
    try:
        await pool.probe_once()
        gids = iter(range(1, 1000))
        reads = Reads(pool, lambda n: next(gids), 2**20)
        call = validate_call(
            {"jsonrpc": "2.0", "id": 7, "method": "eth_call", "params": [{}, "latest"]},
            DEFAULT_METHODS,
        )
        owner = asyncio.create_task(reads.single(call))
        await asyncio.sleep(0.05)
        joined = asyncio.create_task(reads.single(call))
        await asyncio.sleep(0.05)
        owner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await owner
        answer = await asyncio.wait_for(joined, 5)
        assert isinstance(answer, Relay)
        body = await answer.start() + b"".join([c async for c in answer.rest()])
        assert orjson.loads(body)["id"] == 7
        assert node.by_method["eth_call"] == 2  # the owner's flight, then the joiner's own
        transport = pool.nodes[0].transport
        assert isinstance(transport, LeanTransport)
        client = transport.client
        await eventually(lambda: client.open_connections == len(client._idle), 3.0)
    finally:
        await pool.close()
        await node.close()
