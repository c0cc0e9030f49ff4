"""One pipeline, two transports: the same table of requests through HTTP
and through a WebSocket gets the same JSON-RPC answers, byte for byte.

Real gateway (``GatewayRunner``), real Redis, mock nodes. Each case names
what it shows (guard, cache, clamp, allowlist, caps, ids, a large answer,
an unknown method, a batch with mixed errors, frames that are not requests)
and checks the answer itself, not only that both transports agree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest

from gateway import typedefs as T
from gateway.demo import chainnode
from gateway.demo.mocknode import MockNode, MockNodeOptions
from gateway.rpc.relay import STREAM_OVER
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import MakeConfig
from tests.helpers.served import Served, served
from tests.helpers.waiting import eventually

BIG = 3 * STREAM_OVER  # the large answer: streamed on HTTP, fragmented on WS


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    status: int  # the HTTP status (the socket stays open whatever it is)
    check: Callable[[bytes], None]
    key: str = "key"  # or "restricted" (a key whose method allowlist is eth_chainId)
    network: str = "bsc"


def _error(code: int, id_: bytes = b"null") -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        assert raw.startswith(b'{"jsonrpc":"2.0","id":' + id_ + b',"error":'), raw[:200]
        assert orjson.loads(raw)["error"]["code"] == code

    return check


def _result(want: Any, id_: bytes) -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        assert raw == b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (id_, orjson.dumps(want))

    return check


def _call(method: str, params: Any = None, id_: bytes = b"1") -> bytes:
    p = b"" if params is None else b',"params":' + orjson.dumps(params)
    return b'{"jsonrpc":"2.0","id":%s,"method":"%s"%s}' % (id_, method.encode(), p)


def _guard(raw: bytes) -> None:
    _error(-32602, b'"g"')(raw)
    assert orjson.loads(raw)["error"]["data"]["max_logs_range"] == 10_000


def _large(raw: bytes) -> None:
    assert raw.startswith(b'{"jsonrpc":"2.0","id":18446744073709551616,"result":"0xabab')
    assert len(orjson.loads(raw)["result"]) == 2 + 2 * (BIG // 2)


def _mixed(raw: bytes) -> None:
    got = orjson.loads(raw)
    assert raw.startswith(b'[{"jsonrpc":"2.0","id":"a\\u00e9","result":"0x38"}')
    assert [a["id"] for a in got] == ["a\u00e9", None, 3, 4]
    assert "result" in got[0]
    assert got[1]["error"]["code"] == -32600  # 5 is not a request object
    assert got[2]["error"]["code"] == -32601  # no such method (the notification: no answer)
    assert got[3]["error"]["code"] == -32602  # the guard, in a batch


CASES = [
    Case(
        "guard refuses a wide eth_getLogs",
        _call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest"}], b'"g"'),
        200,
        _guard,
    ),
    Case("cache: net_version", _call("net_version", None, b"7"), 200, _result("56", b"7")),
    Case(
        "method allowlist",
        _call("eth_getBalance", ["0x" + "1" * 40, "latest"], b"9"),
        403,
        _error(-32001, b"9"),
        key="restricted",
    ),
    Case("unknown method", _call("eth_nope", None, b"10"), 200, _error(-32601, b"10")),
    Case("not JSON", b"{nope", 200, _error(-32700)),
    Case("not a request", b'"hello"', 200, _error(-32600)),
    Case("a number", b"5", 200, _error(-32600)),
    Case("empty batch", b"[]", 200, _error(-32600)),
    Case(
        "batch over the cap",
        b"[" + b",".join([_call("eth_chainId")] * 1001) + b"]",
        200,
        _error(-32600),
    ),
    Case("nested too deep", b"[" * 70 + b"]" * 70, 200, _error(-32600)),
    Case(
        "escaped string id",
        _call("eth_chainId", None, rb'"peer-\u00e9-0"'),
        200,
        _result("0x38", rb'"peer-\u00e9-0"'),
    ),
    Case(
        "surrogate pair id",
        _call("eth_chainId", None, rb'"\ud83d\ude00-\/"'),
        200,
        _result("0x38", rb'"\ud83d\ude00-\/"'),
    ),
    Case("1e400 id", _call("eth_chainId", None, b"1e400"), 200, _result("0x38", b"1e400")),
    Case("-0 id", _call("eth_chainId", None, b"-0"), 200, _result("0x38", b"-0")),
    Case("1.0 id", _call("eth_chainId", None, b"1.0"), 200, _result("0x38", b"1.0")),
    Case(
        "2**70 id",
        _call("eth_chainId", None, b"1180591620717411303424"),
        200,
        _result("0x38", b"1180591620717411303424"),
    ),
    Case(
        "large answer",
        _call("eth_call", [{"to": "0x" + "2" * 40}, "latest"], b"18446744073709551616"),
        200,
        _large,
        network="opbnb",
    ),
    Case(
        "batch with mixed errors",
        b"["
        + _call("eth_chainId", None, rb'"a\u00e9"')
        + b",5,"
        + b'{"jsonrpc":"2.0","method":"eth_nope"},'
        + _call("eth_nope", None, b"3")
        + b","
        + _call("eth_getLogs", [{"fromBlock": "earliest"}], b"4")
        + b"]",
        200,
        _mixed,
    ),
]


@pytest.fixture
async def gateway(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode]
) -> AsyncIterator[Served]:
    mock_nodes["opbnb"].options = MockNodeOptions(chain_id=204, block_time_s=0, result_bytes=BIG)
    async with served(make_config()) as srv:
        yield srv


@pytest.fixture
async def keys(store: Store, account: str) -> dict[str, str]:
    key, _ = await store.create_key(account, name="parity")
    restricted, _ = await store.create_key(account, name="narrow", methods=["eth_chainId"])
    return {"key": key, "restricted": restricted}


async def _over_http(http: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    async with http.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.read()


async def _over_ws(http: aiohttp.ClientSession, url: str, body: bytes) -> bytes:
    async with http.ws_connect("ws" + url[4:], max_msg_size=0) as ws:
        await ws.send_bytes(body)
        msg = await ws.receive(timeout=10)
        assert msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), msg
        data = msg.data
        return data.encode() if isinstance(data, str) else bytes(data)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_http_and_websocket_answer_alike(
    case: Case, gateway: Served, keys: dict[str, str], mock_nodes: dict[str, MockNode]
) -> None:
    url = f"{gateway.url}/{case.network}/{keys[case.key]}"
    async with aiohttp.ClientSession() as http:
        status, over_http = await _over_http(http, url, case.body)
        over_ws = await _over_ws(http, url, case.body)
    assert status == case.status, over_http[:300]
    case.check(over_http)
    assert over_ws == over_http
    if case.name.startswith("guard"):  # refused by the gateway: no node saw it
        assert mock_nodes["bsc"].by_method.get("eth_getLogs", 0) == 0
    if case.name.startswith("cache"):  # the second transport's call was a cache hit
        assert mock_nodes["bsc"].by_method.get("net_version", 0) == 1


async def test_eth_blocknumber_never_goes_back_on_either_transport(
    gateway: Served, keys: dict[str, str], mock_nodes: dict[str, MockNode]
) -> None:
    """The head clamp is a pipeline step: a node that falls behind moves no answer back."""
    url = f"{gateway.url}/bsc/{keys['key']}"
    node = mock_nodes["bsc"]
    body = _call("eth_blockNumber", None, b"8")
    async with aiohttp.ClientSession() as http:
        _, first = await _over_http(http, url, body)
        node.set_head_offset(-5)
        answers = [await _over_ws(http, url, body), (await _over_http(http, url, body))[1]]
    assert first == b'{"jsonrpc":"2.0","id":8,"result":"%s"}' % hex(node.head + 5).encode()
    assert answers == [first, first]


async def test_a_batch_answer_over_the_buffer_bound_is_refused_on_both(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], keys: dict[str, str]
) -> None:
    """A batch's answer is parsed whole to put its ids back: held only up to the bound."""
    mock_nodes["bsc"].options = MockNodeOptions(chain_id=56, block_time_s=0, result_bytes=BIG)
    cfg = make_config({"limits": {"max_buffered_answer_bytes": 2 * STREAM_OVER}})
    body = b"[" + _call("eth_call", [{"to": "0x" + "2" * 40}, "latest"], b"5") + b"]"
    async with served(cfg) as srv, aiohttp.ClientSession() as http:
        url = f"{srv.url}/bsc/{keys['key']}"
        status, over_http = await _over_http(http, url, body)
        over_ws = await _over_ws(http, url, body)
    assert status == 502
    assert over_http == over_ws
    assert orjson.loads(over_http) == [
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -32603, "message": "Upstream unavailable"}}
    ]


async def test_a_large_answer_failing_before_its_head_is_counted_alike(
    make_config: MakeConfig, mock_nodes: dict[str, MockNode], keys: dict[str, str]
) -> None:
    """A large node answer that is not ours (another id): 502 on HTTP, the same body on
    WebSocket, and both counted as 502 in gateway_requests_total (WS said 200)."""
    wrong = b'{"jsonrpc":"2.0","id":999999,"result":"0x' + b"ab" * BIG + b'"}'
    mock_nodes["opbnb"].options = MockNodeOptions(
        chain_id=204, block_time_s=0, raw_answer=wrong, spare_probes=True
    )
    body = _call("eth_call", [{"to": "0x" + "2" * 40}, "latest"], b"4")
    async with served(make_config()) as srv, aiohttp.ClientSession() as http:
        url = f"{srv.url}/opbnb/{keys['key']}"
        status, over_http = await _over_http(http, url, body)
        over_ws = await _over_ws(http, url, body)
        requests = srv.app[METRICS].requests
        counted = requests.labels("opbnb", "eth_call", "502")._value.get()
    assert status == 502 and over_ws == over_http
    _error(-32603, b"4")(over_http)
    assert counted == 2


# -- batches get what single calls get -------------------------------------------
_ADDR = "0x" + "3" * 40
BATCH_ROWS = [
    ("constants", [("eth_chainId", None), ("net_version", None)]),
    ("head reads", [("eth_blockNumber", None), ("eth_getBlockByNumber", ["latest", False])]),
    (
        "state and blocks",
        [
            ("eth_getBalance", [_ADDR, "latest"]),
            ("eth_call", [{"to": _ADDR, "data": "0x"}, "latest"]),
            ("eth_getBlockByNumber", ["0x1", False]),
        ],
    ),
    ("an unknown method among reads", [("eth_nope", None), ("eth_chainId", None)]),
]


@pytest.mark.parametrize("row", BATCH_ROWS, ids=[r[0] for r in BATCH_ROWS])
async def test_a_batch_answers_as_its_calls_sent_singly(
    row: tuple[str, list[tuple[str, Any]]], gateway: Served, keys: dict[str, str]
) -> None:
    """Each call of a batch answers exactly what it answers sent alone, on both transports."""
    calls = row[1]
    url = f"{gateway.url}/bsc/{keys['key']}"
    async with aiohttp.ClientSession() as http:
        singles = [
            (await _over_http(http, url, _call(m, p, b"%d" % i)))[1]
            for i, (m, p) in enumerate(calls)
        ]
        batch = b"[" + b",".join(_call(m, p, b"%d" % i) for i, (m, p) in enumerate(calls)) + b"]"
        status, over_http = await _over_http(http, url, batch)
        over_ws = await _over_ws(http, url, batch)
    assert status == 200
    assert orjson.loads(over_http) == [orjson.loads(s) for s in singles]
    assert over_ws == over_http


async def test_a_batch_is_clamped_and_routed_by_block_like_a_single_call(
    make_config: MakeConfig, keys: dict[str, str]
) -> None:
    """One node 6 blocks behind: a batch's eth_blockNumber never answers below a single
    call's answered before it, and a batch asking for the head block never gets null."""
    chain = chainnode.Chain(56, start=1_000)
    nodes = [
        await chainnode.start_chain_node(chain),
        await chainnode.start_chain_node(chain, lag=6),
    ]
    cfg = make_config(
        {
            "upstream": {"probe_interval_s": 0.05},
            "plans": {"free": {"rate": 10_000, "burst": 10_000}},
        },
        upstreams={"bsc": [n.url for n in nodes]},
    )
    try:
        async with served(cfg) as srv, aiohttp.ClientSession() as http:
            pool = srv.app[T.POOLS]["bsc"]
            url = f"{srv.url}/bsc/{keys['key']}"
            for _ in range(10):
                chain.advance()
                target = chain.head
                await eventually(lambda t=target: pool.intel.heads.node_head("bsc-1") == t - 6)
                _, single = await _over_http(http, url, _call("eth_blockNumber", None))
                shown = int(orjson.loads(single)["result"], 16)
                for _ in range(4):  # both nodes get a turn
                    batch = (
                        b"["
                        + _call("eth_blockNumber", None, b"1")
                        + b","
                        + _call("eth_getBlockByNumber", [hex(target), False], b"2")
                        + b"]"
                    )
                    _, body = await _over_http(http, url, batch)
                    assert all("result" in a for a in orjson.loads(body)), body
                    number, block = [a["result"] for a in orjson.loads(body)]
                    assert int(number, 16) >= shown
                    assert block is not None and block["number"] == hex(target)
    finally:
        for node in nodes:
            await node.close()
