"""Tests for the mock node: real sockets on port 0, aiohttp as the client.

The gateway's own tests and every benchmark trust this node, so it is tested
for exact id echo, HTTP framing (keep-alive, pipelining, chunked, close) and
for fault injection that is reproducible with a seed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from tests.helpers.waiting import eventually

NodeFactory = Callable[..., Awaitable[MockNode]]


@pytest.fixture
async def make_node() -> AsyncIterator[NodeFactory]:
    nodes: list[MockNode] = []

    async def factory(**kwargs: Any) -> MockNode:
        node = await start_mock_node(MockNodeOptions(**kwargs))
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def post(
    session: aiohttp.ClientSession, node: MockNode, body: bytes
) -> tuple[int, bytes, aiohttp.ClientResponse]:
    async with session.post(node.url, data=body) as resp:
        return resp.status, await resp.read(), resp


def call(method: str, params: list[Any] | None = None, cid: Any = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": cid, "method": method, "params": params or []})


async def rpc(session: aiohttp.ClientSession, node: MockNode, method: str, *params: Any) -> Any:
    status, body, _ = await post(session, node, call(method, list(params)))
    assert status == 200
    return orjson.loads(body)


async def raw_exchange(node: MockNode, data: bytes) -> bytes:
    """Write raw bytes, read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()


def raw_request(body: bytes, *, close: bool = False) -> bytes:
    conn = b"Connection: close\r\n" if close else b""
    return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), conn, body)


async def test_methods_answer_chain_data(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    bsc = await make_node(chain_id=56, block_time_s=0, start_block=500)
    opbnb = await make_node(chain_id=204)
    assert (await rpc(session, bsc, "eth_chainId"))["result"] == "0x38"
    assert (await rpc(session, opbnb, "eth_chainId"))["result"] == "0xcc"
    assert (await rpc(session, opbnb, "net_version"))["result"] == "204"
    assert (await rpc(session, bsc, "eth_blockNumber"))["result"] == hex(500)
    block = (await rpc(session, bsc, "eth_getBlockByNumber", "latest", False))["result"]
    assert block["number"] == hex(500) and block["transactions"] == []
    assert (await rpc(session, bsc, "eth_getBlockByNumber", "0x1f5", False))["result"] is None
    assert (await rpc(session, bsc, "eth_getLogs", {}))["result"] == []
    for method in ("eth_getBalance", "eth_call", "eth_gasPrice"):
        assert (await rpc(session, bsc, method))["result"].startswith("0x")
    transfer = {"to": "0x" + "22" * 20, "value": "0x1"}
    assert (await rpc(session, bsc, "eth_estimateGas", transfer))["result"] == hex(21_000)
    nonce = await rpc(session, bsc, "eth_getTransactionCount", "0x" + "11" * 20, "latest")
    assert nonce["result"] == "0x0"
    assert "chain-56" in (await rpc(session, bsc, "web3_clientVersion"))["result"]
    tx1 = (await rpc(session, bsc, "eth_sendRawTransaction", "0xf86c01"))["result"]
    tx2 = (await rpc(session, bsc, "eth_sendRawTransaction", "0xf86c01"))["result"]
    tx3 = (await rpc(session, bsc, "eth_sendRawTransaction", "0xf86c02"))["result"]
    assert tx1 == tx2 != tx3 and len(tx1) == 66
    assert (await rpc(session, bsc, "eth_sendRawTransaction", 5))["error"]["code"] == -32602
    assert (await rpc(session, bsc, "debug_traceCall"))["error"]["code"] == -32601


@pytest.mark.parametrize(
    "raw_id",
    [b"123456789012345678901234567890", b"-98765432109876543210987654321", b"1E2", b"7", b"null"],
)
async def test_ids_are_echoed_byte_exact(
    make_node: NodeFactory, session: aiohttp.ClientSession, raw_id: bytes
) -> None:
    node = await make_node()
    body = b'{"jsonrpc":"2.0","id":%s,"method":"eth_chainId"}' % raw_id
    status, reply, _ = await post(session, node, body)
    assert status == 200
    assert b'"id":%s,' % raw_id in reply
    batch = b'[{"jsonrpc":"2.0","id":%s,"method":"net_version"},' % raw_id
    batch += b'{"jsonrpc":"2.0","id":"a","method":"eth_chainId"}]'
    status, reply, _ = await post(session, node, batch)
    assert b'"id":%s,' % raw_id in reply and b'"id":"a"' in reply


async def test_string_id_round_trips(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    reply = await rpc(session, node, "eth_chainId")
    assert reply["id"] == 1
    _, body, _ = await post(session, node, call("eth_chainId", cid='ü-"x"'))
    assert orjson.loads(body)["id"] == 'ü-"x"'


async def test_batch_keeps_order_and_skips_notifications(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    batch = [
        {"jsonrpc": "2.0", "id": 3, "method": "eth_chainId"},
        {"jsonrpc": "2.0", "method": "eth_blockNumber"},
        {"jsonrpc": "2.0", "id": "x", "method": "nope"},
        {"jsonrpc": "2.0", "id": 1, "method": "net_version"},
        42,
    ]
    status, body, _ = await post(session, node, orjson.dumps(batch))
    assert status == 200
    replies = orjson.loads(body)
    assert [r["id"] for r in replies] == [3, "x", 1, None]
    assert replies[1]["error"]["code"] == -32601
    assert replies[3]["error"]["code"] == -32600
    assert node.calls == 4 and node.by_method["eth_blockNumber"] == 1


async def test_notifications_only_get_204(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    note = {"jsonrpc": "2.0", "method": "eth_chainId"}
    for body in (orjson.dumps(note), orjson.dumps([note, note])):
        status, reply, _ = await post(session, node, body)
        assert (status, reply) == (204, b"")
    assert node.calls == 3 and node.requests == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [(b"{not json", -32700), (b"", -32700), (b"[]", -32600), (b'{"id":1}', -32600)],
)
async def test_bad_bodies(
    make_node: NodeFactory, session: aiohttp.ClientSession, body: bytes, code: int
) -> None:
    node = await make_node()
    status, reply, _ = await post(session, node, body)
    assert status == 200
    assert orjson.loads(reply)["error"]["code"] == code


async def test_non_post_is_405(make_node: NodeFactory, session: aiohttp.ClientSession) -> None:
    node = await make_node()
    async with session.get(node.url) as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "POST"


async def test_keep_alive_reuses_one_connection(make_node: NodeFactory) -> None:
    node = await make_node()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        for i in range(5):
            _, body, _ = await post(session, node, call("eth_chainId", cid=i))
            assert orjson.loads(body)["id"] == i
        assert node.open_connections == 1
    assert node.requests == 5


async def test_pipelined_answers_stay_in_order_despite_jitter(make_node: NodeFactory) -> None:
    node = await make_node(latency_ms=1, latency_jitter_ms=20, seed=3)
    data = b"".join(raw_request(call("net_version", cid=i)) for i in range(8))
    data += raw_request(call("eth_chainId", cid=8), close=True)
    reply = await raw_exchange(node, data)
    ids = [int(part.split(b",")[0]) for part in reply.split(b'"id":')[1:]]
    assert ids == list(range(9))
    assert reply.count(b"HTTP/1.1 200 OK") == 9 and b"Connection: close" in reply


async def test_connection_close_is_honoured(make_node: NodeFactory) -> None:
    node = await make_node()
    # the request after a Connection: close request must not be answered
    data = raw_request(call("eth_chainId"), close=True) + raw_request(call("net_version"))
    reply = await raw_exchange(node, data)
    assert reply.count(b"HTTP/1.1") == 1
    http10 = b"POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n[]"
    assert (await raw_exchange(node, http10)).startswith(b"HTTP/1.1 200 OK")


async def test_malformed_http_gets_400_and_close(make_node: NodeFactory) -> None:
    node = await make_node()
    reply = await raw_exchange(node, b"garbage\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400") and b"Connection: close" in reply


async def test_framing_errors_after_good_requests(make_node: NodeFactory) -> None:
    """Requests before a bad one in the same read are answered, then the error, then close."""
    node = await make_node()
    good = raw_request(call("eth_chainId"))
    reply = await raw_exchange(
        node, good + b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"
    )
    first, _, rest = reply.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK")
    assert reply.count(b"HTTP/1.1 ") == 2
    assert b"HTTP/1.1 413 Payload Too Large" in rest and b"Connection: close" in rest


async def test_chunked_body(make_node: NodeFactory, session: aiohttp.ClientSession) -> None:
    node = await make_node()

    async def chunks() -> AsyncIterator[bytes]:
        body = call("eth_chainId", cid=9)
        yield body[:10]
        yield body[10:]

    async with session.post(node.url, data=chunks()) as resp:
        assert orjson.loads(await resp.read()) == {"jsonrpc": "2.0", "id": 9, "result": "0x38"}


async def _fault_statuses(node: MockNode, n: int) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession() as session:
        for i in range(n):
            try:
                async with session.post(node.url, data=call("eth_chainId", cid=i)) as resp:
                    body = orjson.loads(await resp.read())
                    statuses.append(resp.status)
                    if resp.status == 429:
                        assert resp.headers["Retry-After"] == "1"
                        assert body["error"]["code"] == -32005 and body["id"] == i
                    elif resp.status == 500:
                        assert body["error"]["code"] == -32603 and body["id"] == i
            except aiohttp.ClientConnectionError:
                statuses.append(0)
    return statuses


async def test_fault_rates_are_seeded_and_roughly_right(make_node: NodeFactory) -> None:
    opts = {"error_rate": 0.2, "rate_429": 0.2, "drop_rate": 0.1, "seed": 7}
    first = await _fault_statuses(await make_node(**opts), 300)
    second = await _fault_statuses(await make_node(**opts), 300)
    assert first == second
    for status, rate in ((500, 0.2), (429, 0.2), (0, 0.1), (200, 0.5)):
        assert abs(first.count(status) / 300 - rate) < 0.08, status


async def test_options_swap_at_runtime(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.options = dataclasses.replace(node.options, error_rate=1.0)
    assert (await post(session, node, call("eth_chainId")))[0] == 500
    node.options = dataclasses.replace(node.options, error_rate=0.0, latency_ms=60)
    start = time.monotonic()
    assert (await post(session, node, call("eth_chainId")))[0] == 200
    assert time.monotonic() - start >= 0.055


async def test_down_drops_connections_and_recovers(
    make_node: NodeFactory, session: aiohttp.ClientSession
) -> None:
    node = await make_node(latency_ms=200)
    pending = asyncio.ensure_future(post(session, node, call("eth_chainId")))
    await asyncio.sleep(0.05)
    node.down = True
    with pytest.raises(aiohttp.ClientConnectionError):
        await pending
    with pytest.raises(aiohttp.ClientConnectionError):
        await post(session, node, call("eth_chainId"))
    assert node.open_connections == 0
    node.down = False
    node.options = dataclasses.replace(node.options, latency_ms=0)
    assert (await post(session, node, call("eth_chainId")))[0] == 200


async def test_head_advances_and_lags(make_node: NodeFactory) -> None:
    node = await make_node(block_time_s=0.05, start_block=100)
    assert node.head in (100, 101)
    await eventually(lambda: node.head >= 103, 5.0, "three blocks at 0.05 s each")
    frozen = await make_node(block_time_s=0, start_block=100)
    await asyncio.sleep(0.06)
    assert frozen.head == 100
    frozen.set_head_offset(-5)
    assert frozen.head == 95
    frozen.set_head_offset(-5)  # sets, does not accumulate
    assert frozen.head == 95


async def test_close_with_answers_in_flight(make_node: NodeFactory) -> None:
    node = await make_node(latency_ms=500)
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    writer.write(raw_request(call("eth_chainId")))
    await writer.drain()
    await asyncio.sleep(0.02)
    await node.close()
    assert await reader.read() == b""
    writer.close()
    await writer.wait_closed()


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        MockNodeOptions(error_rate=0.6, drop_rate=0.6)
    with pytest.raises(ValueError):
        MockNodeOptions(latency_ms=-1)
    with pytest.raises(ValueError):
        MockNodeOptions(latency_dist="pareto")  # type: ignore[arg-type]
