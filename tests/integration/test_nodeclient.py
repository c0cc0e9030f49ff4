"""The lean node client against real sockets: framing, keep-alive, failures."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import free_port
from gateway.upstream.errors import UpstreamError
from gateway.upstream.nodeclient import NodeClient

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'


@pytest.fixture
async def node() -> AsyncIterator[MockNode]:
    n = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
    yield n
    await n.close()


@pytest.fixture
async def client_for() -> AsyncIterator[Callable[..., NodeClient]]:
    clients: list[NodeClient] = []

    def make(url: str, **kw: object) -> NodeClient:
        c = NodeClient(url, **kw)  # type: ignore[arg-type]
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.close()


async def test_post_and_keep_alive(node: MockNode, client_for: Callable[..., NodeClient]) -> None:
    client = client_for(node.url)
    for _ in range(20):
        status, body = await client.post(CALL, 5.0)
        assert status == 200 and body == b'{"jsonrpc":"2.0","id":1,"result":"0x38"}'
    assert client.open_connections == 1 and node.open_connections == 1


async def test_connection_cap_queues_callers(
    node: MockNode, client_for: Callable[..., NodeClient]
) -> None:
    node.options = dataclasses.replace(node.options, latency_ms=20)
    client = client_for(node.url, max_connections=4)
    results = await asyncio.gather(*(client.post(CALL, 5.0) for _ in range(40)))
    assert all(status == 200 for status, _ in results)
    assert client.open_connections <= 4


async def aiohttp_node(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> TestServer:
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    server = TestServer(app)
    await server.start_server()
    return server


async def test_chunked_large_and_connection_close(client_for: Callable[..., NodeClient]) -> None:
    big = b'{"result":"' + b"a" * 3_000_000 + b'"}'

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.path == "/rpc" and request.query_string == "x=1"
        assert request.headers["Content-Type"] == "application/json"
        assert await request.read() == CALL
        if request.headers.get("X-Mode") is None and request.path == "/rpc":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(0, len(big), 65536):
                await resp.write(big[i : i + 65536])
            await resp.write_eof()
            return resp
        return web.Response(body=b"{}")  # pragma: no cover

    server = await aiohttp_node(handler)
    try:
        client = client_for(str(server.make_url("/rpc?x=1")))
        for _ in range(3):
            status, body = await client.post(CALL, 10.0)
            assert status == 200 and body == big
        assert client.open_connections == 1
    finally:
        await server.close()


async def test_body_until_close_and_http_errors(client_for: Callable[..., NodeClient]) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.0 503 Service Unavailable\r\n\r\n{"busy":true}')
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        client = client_for(f"http://127.0.0.1:{port}")
        for _ in range(2):  # each answer closes its connection; the next opens anew
            assert await client.post(CALL, 5.0) == (503, b'{"busy":true}')
    finally:
        srv.close()
        await srv.wait_closed()


async def test_timeout_and_refused(node: MockNode, client_for: Callable[..., NodeClient]) -> None:
    node.options = dataclasses.replace(node.options, latency_ms=1000)
    client = client_for(node.url)
    with pytest.raises(UpstreamError) as exc:
        await client.post(CALL, 0.1)
    assert exc.value.timeout and exc.value.sent
    refused = client_for(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(UpstreamError) as exc:
        await refused.post(CALL, 1.0)
    assert not exc.value.sent and not exc.value.timeout


async def test_node_dropping_connections(
    node: MockNode, client_for: Callable[..., NodeClient]
) -> None:
    client = client_for(node.url)
    assert (await client.post(CALL, 5.0))[0] == 200
    node.down = True
    with pytest.raises(UpstreamError):
        await client.post(CALL, 1.0)
    node.down = False
    assert (await client.post(CALL, 5.0))[0] == 200


async def test_cancelled_call_drops_its_connection(
    node: MockNode, client_for: Callable[..., NodeClient]
) -> None:
    node.options = dataclasses.replace(node.options, latency_ms=300)
    client = client_for(node.url)
    task = asyncio.ensure_future(client.post(CALL, 5.0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    node.options = dataclasses.replace(node.options, latency_ms=0)
    # the late answer must not be handed to the next caller
    status, body = await client.post(CALL, 5.0)
    assert isinstance(body, bytes)
    assert status == 200 and b'"result":"0x38"' in body


def test_rejects_non_http_urls() -> None:
    with pytest.raises(ValueError):
        NodeClient("ftp://example.com")


async def test_idle_connections_are_not_reused_after_the_idle_timeout(
    node: MockNode, client_for: Callable[..., NodeClient]
) -> None:
    client = client_for(node.url, idle_timeout_s=0.05)
    assert (await client.post(CALL, 5.0))[0] == 200
    assert client.open_connections == 1
    await asyncio.sleep(0.1)  # past idle_timeout_s: the connection is stale, nothing to poll
    assert (await client.post(CALL, 5.0))[0] == 200
    assert client.open_connections == 1  # the stale one was closed, a fresh one opened
