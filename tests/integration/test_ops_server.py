"""The listening side (gateway/server/connection.py) against raw sockets: slow clients,
the connection cap, malformed HTTP, deep JSON and the drain.

Each test serves the real app through ``GatewayRunner`` on port 0 with small
timeouts, and talks to it with plain asyncio streams so it can misbehave in
ways an HTTP client library would not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Config
from gateway.demo.mocknode import MockNode, MockNodeOptions
from gateway.server.listener import GatewayRunner
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401  (both doors)
from tests.helpers.served import served

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'


def _server_cfg(make_config: MakeConfig, **server: Any) -> Config:
    table = {
        "header_timeout_s": 0.4,
        "body_timeout_s": 0.4,
        "keepalive_timeout_s": 5.0,
        "drain_timeout_s": 3.0,
        **server,
    }
    cfg: Config = make_config({"server": table})
    return cfg


def _request(key: str, body: bytes = CALL, extra: bytes = b"") -> bytes:
    return (
        b"POST /bsc/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n%s" % (key.encode(), len(body), extra, body)
    )


async def _closed_after(reader: asyncio.StreamReader, limit_s: float = 5.0) -> tuple[float, bytes]:
    """Seconds until the server closes the connection, and what it sent before."""
    started = time.monotonic()
    data = b""
    async with asyncio.timeout(limit_s):
        while chunk := await reader.read(65536):
            data += chunk
    return time.monotonic() - started, data


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


@pytest.mark.slow
async def test_slowloris_header_closed_within_header_timeout(
    make_config: MakeConfig, api_key: str
) -> None:
    async with served(_server_cfg(make_config)) as srv:
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        started = time.monotonic()
        head = _request(api_key)

        async def trickle() -> None:
            for byte in head:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)

        task = asyncio.create_task(trickle())
        _, sent = await _closed_after(reader)
        elapsed = time.monotonic() - started
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _close(writer)
        assert sent == b""  # closed, nothing answered
        assert 0.25 <= elapsed < 1.0, elapsed
        assert srv.runner.watch.timeouts == 1


@pytest.mark.slow
async def test_silent_connection_closed_within_header_timeout(make_config: MakeConfig) -> None:
    async with served(_server_cfg(make_config)) as srv:
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        elapsed, sent = await _closed_after(reader)
        await _close(writer)
        assert sent == b"" and 0.25 <= elapsed < 1.0, elapsed


@pytest.mark.slow
async def test_slow_body_closed_within_body_timeout(
    make_config: MakeConfig, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with served(_server_cfg(make_config)) as srv:
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        request = _request(api_key)
        writer.write(request[:-10])  # the whole head, most of the body, then nothing
        elapsed, _ = await _closed_after(reader)
        await _close(writer)
        assert 0.25 <= elapsed < 1.0, elapsed
        assert srv.runner.watch.timeouts == 1
        await asyncio.sleep(0.05)  # let the handler see the closed connection
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.slow
async def test_keepalive_idle_is_not_a_header_timeout(
    make_config: MakeConfig, api_key: str
) -> None:
    """Between requests the keep-alive timeout rules, not the header timeout."""
    async with (
        served(_server_cfg(make_config, header_timeout_s=0.3)) as srv,
        aiohttp.ClientSession() as session,
    ):
        url = f"http://{HOST}:{srv.port}/bsc/{api_key}"
        for _ in range(2):
            async with session.post(
                url, data=CALL, headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 200
            await asyncio.sleep(0.6)  # idle longer than the header timeout
        assert srv.runner.watch.timeouts == 0
        assert srv.runner.watch.connections == 1  # one keep-alive connection all along


async def test_pipelined_and_fast_requests_are_not_cut(
    make_config: MakeConfig, api_key: str
) -> None:
    async with served(_server_cfg(make_config)) as srv:
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        writer.write(_request(api_key) * 3)
        seen = b""
        async with asyncio.timeout(3):
            while seen.count(b'"result"') < 3:
                seen += await reader.read(65536)
        await _close(writer)
        assert seen.count(b"HTTP/1.1 200") == 3
        assert srv.runner.watch.timeouts == 0


async def test_connection_cap_answers_503_and_recovers(
    make_config: MakeConfig, api_key: str
) -> None:
    async with served(_server_cfg(make_config, max_connections=2, header_timeout_s=5)) as srv:
        held = [await asyncio.open_connection(HOST, srv.port) for _ in range(2)]
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        _, sent = await _closed_after(reader)
        await _close(writer)
        assert sent.startswith(b"HTTP/1.1 503 ")
        body = orjson.loads(sent.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == -32603
        assert body["error"]["message"] == "Service unavailable: too many connections"
        assert srv.runner.watch.rejected == 1
        for _, w in held:
            await _close(w)
        await asyncio.sleep(0.05)
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://{HOST}:{srv.port}/bsc/{api_key}",
                data=CALL,
                headers={"Content-Type": "application/json"},
            ) as resp,
        ):
            assert resp.status == 200
        assert srv.runner.watch.connections <= 1


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /bsc/%s HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"POST /bsc/%s HTTP/1.1\r\nHost: x\r\nBad Header %s\r\n\r\n",
        b"GARBAGE /bsc/%s \x00\x01\r\n\r\n",
        b"POST /bsc/%s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n%s\r\n",
    ],
)
async def test_malformed_http_json_error_no_echo(
    make_config: MakeConfig, api_key: str, raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    payload = raw.replace(b"%s", api_key.encode())
    async with served(_server_cfg(make_config)) as srv:
        reader, writer = await asyncio.open_connection(HOST, srv.port)
        writer.write(payload)
        _, sent = await _closed_after(reader)
        await _close(writer)
    assert sent.startswith((b"HTTP/1.1 400 ", b"HTTP/1.0 400 ")), sent[:80]
    body = orjson.loads(sent.split(b"\r\n\r\n", 1)[1])
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid Request"},
    }
    assert api_key.encode() not in sent
    for record in caplog.records:
        assert api_key not in record.getMessage()
        assert record.exc_info is None
        assert "Traceback" not in caplog.text


@pytest.mark.parametrize("depth", [65, 300, 2000, 100_000])
async def test_deep_json_refused(
    make_config: MakeConfig, api_key: str, depth: int, mock_nodes: dict[str, MockNode]
) -> None:
    deep = b"[" * depth + b"]" * depth
    single = b'{"jsonrpc":"2.0","id":7,"method":"eth_call","params":' + deep + b"}"
    batch = b'[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":' + deep + b'},{"x":1}]'
    before = mock_nodes["bsc"].by_method["eth_call"]
    async with served(_server_cfg(make_config)) as srv, aiohttp.ClientSession() as s:
        for body in (single, batch):
            async with s.post(
                f"http://{HOST}:{srv.port}/bsc/{api_key}",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                assert resp.status == 200
                answer = await resp.json()
                assert answer["error"]["code"] in (-32600, -32700), answer
    assert mock_nodes["bsc"].by_method["eth_call"] == before  # nothing deep reached a node


async def test_depth_at_the_limit_is_forwarded(
    make_config: MakeConfig, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    # the object is level 1, params level 2: 62 more brackets reach the limit of 64
    deep = b"[" * 63 + b"]" * 63
    single = b'{"jsonrpc":"2.0","id":7,"method":"eth_call","params":' + deep + b"}"
    before = mock_nodes["bsc"].by_method["eth_call"]
    async with (
        served(_server_cfg(make_config)) as srv,
        aiohttp.ClientSession() as s,
        s.post(
            f"http://{HOST}:{srv.port}/bsc/{api_key}",
            data=single,
            headers={"Content-Type": "application/json"},
        ) as resp,
    ):
        assert resp.status == 200
        answer = await resp.json()
    assert answer["id"] == 7, answer
    assert "error" not in answer or answer["error"]["code"] not in (-32600, -32700), answer
    assert mock_nodes["bsc"].by_method["eth_call"] == before + 1  # the node got the call


@pytest.mark.slow
async def test_drain_finishes_in_flight_then_closes(
    make_config: MakeConfig, api_key: str, mock_nodes: dict[str, MockNode]
) -> None:
    node = mock_nodes["bsc"]
    node.options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=400)
    cfg = _server_cfg(make_config)
    runner = GatewayRunner(create_app(cfg))
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = int(runner.addresses[0][1])
    async with aiohttp.ClientSession() as session:

        async def call() -> tuple[int, str | None, bytes]:
            async with session.post(
                f"http://{HOST}:{port}/bsc/{api_key}",
                data=CALL,
                headers={"Content-Type": "application/json"},
            ) as resp:
                return resp.status, resp.headers.get("Connection"), await resp.read()

        calls = [asyncio.create_task(call()) for _ in range(5)]
        await asyncio.sleep(0.15)  # all five are waiting on the slow node
        started = time.monotonic()
        await runner.cleanup()
        drained_in = time.monotonic() - started
        results = await asyncio.gather(*calls)
        with pytest.raises(aiohttp.ClientConnectorError):
            await call()  # no longer listening
    assert [r[0] for r in results] == [200] * 5
    assert all(r[1] == "close" for r in results)
    assert all(b'"result"' in r[2] for r in results)
    assert 0.15 <= drained_in < 2.0


def test_worker_config_round_trip(make_config: MakeConfig) -> None:
    """``gateway serve --workers N`` hands its exact config to the workers."""
    from gateway.config import config_from_dict
    from gateway.server.runner import config_to_raw

    cfg = make_config(
        {
            "server": {
                "header_timeout_s": 1.5,
                "max_connections": 7,
                "trusted_proxies": ["10.0.0.0/8"],
            },
            "plans": {
                "free": {"rate": 2.5, "burst": 9, "weights": {"eth_call": 3}},
                "gold": {"rate": 1000, "burst": 2000, "daily_quota": 5},
            },
            "networks": {"bsc": {"extra_methods": ["eth_newFilter"]}},
            "default_plan": "gold",
            # every section travels, not a list of them (head and tracing once did not)
            "head": {"quorum": 3, "solo_lead": 2},
            "tracing": {"otlp_endpoint": "http://127.0.0.1:4318", "sample_ratio": 0.5},
        }
    )
    raw = orjson.loads(orjson.dumps(config_to_raw(cfg)))
    assert config_from_dict(raw, {}) == cfg
