"""Filters and block objects over real HTTP: what the guard judged is what the node got.

The real app, the real Redis, and a mock node that reads requests the way
geth does (``decode="go"``: keys case-insensitive, last one wins) and keeps
every body it received. A case variant of ``fromBlock`` once slipped past
the guard, which read the exact spelling, and had the node scan a million
blocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mocknode import MockNode, MockNodeOptions, go_decode, start_mock_node
from tests.helpers.config import MakeConfig

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
ADDR = "0x" + "ab" * 20
H32 = "0x" + "cd" * 32


@pytest.fixture
async def go_node() -> AsyncIterator[MockNode]:
    node = await start_mock_node(
        MockNodeOptions(chain_id=56, block_time_s=0, start_block=1_000_000, decode="go")
    )
    yield node
    await node.close()


@pytest.fixture
async def gw(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], go_node: MockNode
) -> Client:
    cfg = make_config(
        {
            "plans": {"free": {"rate": 100_000, "burst": 100_000}},
            "upstream": {"probe_interval_s": 60},
        },
        upstreams={"bsc": [go_node.url]},
    )
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    await client.app[T.POOLS]["bsc"].probe_once()  # the head is known: the guard can measure
    return client


def _forwarded(node: MockNode, method: str) -> list[Any]:
    """The params of every ``method`` call the node received, as Go decoded the bytes."""
    out = []
    for body in node.bodies:
        msg = go_decode(body)
        for call in msg if isinstance(msg, list) else [msg]:
            if call.get("method") == method:
                out.append(call.get("params"))
    return out


async def _post(gw: Client, key: str, body: bytes) -> Any:
    resp = await gw.post(f"/bsc/{key}", data=body, headers=JSON)
    assert resp.status == 200, await resp.text()
    return orjson.loads(await resp.read())


def _get_logs(filter_json: bytes, id_: int = 1) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"eth_getLogs","params":[%s]}' % (id_, filter_json)


@pytest.mark.parametrize(
    "filter_json",
    [
        b'{"FromBlock":"0x0"}',
        b'{"fromBlock":"latest","FROMBLOCK":"0x0"}',
        b'{"fromBloc\\u212a":"0x0"}',  # KELVIN SIGN folds onto k in Go
        b'{"fromBlock":"0X0"}',  # geth reads the 0X prefix too
    ],
)
async def test_a_case_variant_range_is_refused_and_never_reaches_the_node(
    gw: Client, go_node: MockNode, api_key: str, filter_json: bytes
) -> None:
    answer = await _post(gw, api_key, _get_logs(filter_json, 9))
    assert answer["id"] == 9
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["data"]["requested_range"] > 1_000_000
    assert _forwarded(go_node, "eth_getLogs") == []
    # the same in a batch: only that call is refused, the other one goes
    batch = b"[%s,%s]" % (_get_logs(filter_json, 1), _get_logs(b'{"toBlock":"latest"}', 2))
    answers = {a["id"]: a for a in await _post(gw, api_key, batch)}
    assert answers[1]["error"]["code"] == -32602 and answers[2]["result"] == []
    assert _forwarded(go_node, "eth_getLogs") == [[{"toBlock": "latest"}]]


async def test_what_the_node_receives_is_the_rebuild_it_reads_alike(
    gw: Client, go_node: MockNode, api_key: str
) -> None:
    # a narrow range spelled oddly, with an unknown member and a duplicate
    body = _get_logs(
        b'{"fromBlock":"0x0","FROMBLOCK":"0xf423f","TOBLOCK":"0XF4240",'
        b'"Address":"%s","junk":{"fromBlock":"0x0"}}' % ADDR.encode()
    )
    answer = await _post(gw, api_key, body)
    assert answer["result"] == []
    got = [b for b in go_node.bodies if b"eth_getLogs" in b]
    assert len(got) == 1
    assert (
        b'"params":[{"fromBlock":"0xf423f","toBlock":"0xf4240","address":"%s"}]' % (ADDR.encode())
        in got[0]
    )
    # exact duplicates: orjson kept the last, and so does the node reading the rebuild
    go_node.bodies.clear()
    await _post(gw, api_key, _get_logs(b'{"fromBlock":"0x0","fromBlock":"latest"}'))
    assert _forwarded(go_node, "eth_getLogs") == [[{"fromBlock": "latest"}]]


async def test_bad_filters_and_block_objects_are_refused_before_the_node(
    gw: Client, go_node: MockNode, api_key: str
) -> None:
    answer = await _post(
        gw, api_key, _get_logs(b'{"blockHash":"%s","FromBlock":"0x1"}' % H32.encode())
    )
    assert answer["error"]["code"] == -32602
    assert "cannot specify both" in answer["error"]["data"]["reason"]
    call = {
        "jsonrpc": "2.0",
        "id": "b",
        "method": "eth_getBalance",
        "params": [ADDR, {"BlockHash": H32, "blockNumber": "0x1"}],
    }
    answer = await _post(gw, api_key, orjson.dumps(call))
    assert answer["id"] == "b" and answer["error"]["code"] == -32602
    assert _forwarded(go_node, "eth_getLogs") == _forwarded(go_node, "eth_getBalance") == []
    call["params"] = [ADDR, {"BLOCKNUMBER": "0xf4240", "requireCanonical": True, "x": 1}]
    answer = await _post(gw, api_key, orjson.dumps(call))
    assert answer["result"] == "0xde0b6b3a7640000"
    assert _forwarded(go_node, "eth_getBalance") == [[ADDR, {"blockNumber": "0xf4240"}]]
