"""Canonical forwarding: what a node receives is the
gateway's own rebuild of the validated call, whatever the client's object held.

The node stand-in decodes the way geth's ``encoding/json`` does
(case-insensitive member names, the last one wins), so a forwarded client
object with ``"Method"`` in it would show up here as the other method.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.rpc import protocol as rpc
from gateway.store.accounts import Store
from gateway.typedefs import POOLS
from gateway.upstream.pool import NodePool
from tests.helpers.config import Client, MakeConfig
from tests.helpers.lease import settle
from tests.helpers.probes import PROBE_BODY, is_probe_call

JSON = {"Content-Type": "application/json"}


def calls_seen(node: MockNode) -> list[tuple[Any, bytes]]:
    """(method, params as JSON) of every call the Go-style node decoded, probes left out."""
    return [(m, orjson.dumps(p)) for m, p in node.received if not is_probe_call(m, p)]


async def _node(**options: Any) -> MockNode:
    return await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0, **options))


@pytest.fixture
async def go_node() -> AsyncIterator[MockNode]:
    node = await _node(decode="go")
    yield node
    await node.close()


async def _client(
    make_config: MakeConfig, aiohttp_client: Any, node: MockNode, **raw: Any
) -> Client:
    # The cache off: these tests count what reaches the node for each call.
    cfg = make_config(
        {
            "upstream": {"probe_interval_s": 60},
            "cache": {"enabled": False, "coalesce": False},
            **raw,
        },
        upstreams={"bsc": [node.url]},
    )
    client: Client = await aiohttp_client(create_app(cfg))
    return client


@pytest.fixture
async def go_client(make_config: MakeConfig, aiohttp_client: Any, go_node: MockNode) -> Client:
    return await _client(make_config, aiohttp_client, go_node)


SMUGGLED = [
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","Method":"debug_traceTransaction"}',
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","METHOD":"debug_traceTransaction",'
    b'"PARAMS":["0xdead"]}',
    b'{"jsonrpc":"2.0","id":1,"Method":"debug_traceTransaction","method":"eth_chainId",'
    b'"params":[],"Params":["0xdead"],"ID":7,"JSONRPC":"1.0"}',
    # Go folds Unicode: U+017F (long s) matches "s", U+212A (Kelvin) matches "k"
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","param\\u017f":["0xdead"]}',
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","param\xc5\xbf":["0xdead"]}',
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","\\u004dethod":"debug_x"}',
    b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[],'
    b'"nested":{"method":"debug_traceTransaction"},"meThod":"admin_addPeer"}',
    # a duplicate the gateway validates as the last one: either way, only eth_chainId
    b'{"jsonrpc":"2.0","id":1,"method":"debug_traceTransaction","method":"eth_chainId"}',
]


@pytest.mark.parametrize("body", SMUGGLED)
async def test_smuggled_members_never_reach_a_go_node(
    go_client: Client, go_node: MockNode, api_key: str, body: bytes
) -> None:
    resp = await go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    assert resp.status == 200
    assert await resp.json() == {"jsonrpc": "2.0", "id": 1, "result": "0x38"}
    assert calls_seen(go_node) == [("eth_chainId", b"[]")]
    # the exact bytes: nothing of the client's object but method and params
    sent = [b for b in go_node.bodies if b != PROBE_BODY]
    assert len(sent) == 1
    assert sent[0].startswith(b'{"jsonrpc":"2.0","id":')
    assert sent[0].endswith(b',"method":"eth_chainId","params":[]}')


async def test_smuggled_members_in_a_batch(
    go_client: Client, go_node: MockNode, api_key: str
) -> None:
    items = [b.replace(b'"id":1', b'"id":%d' % i) for i, b in enumerate(SMUGGLED)]
    items.append(b'{"jsonrpc":"2.0","method":"eth_chainId","Method":"debug_x","id":"n"}')
    items.append(b'{"jsonrpc":"2.0","method":"eth_chainId","Method":"debug_x"}')  # notification
    body = b"[" + b",".join(items) + b"]"
    resp = await go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    assert resp.status == 200
    answer = await resp.json()
    assert [a["id"] for a in answer] == [*range(len(SMUGGLED)), "n"]
    assert all(a["result"] == "0x38" for a in answer)
    assert calls_seen(go_node) == [("eth_chainId", b"[]")] * (len(SMUGGLED) + 2)


async def test_params_reach_the_node_exactly(
    go_client: Client, go_node: MockNode, api_key: str
) -> None:
    params = (
        b'[{"to":"0x01","data":"0x\\u00e9"},"latest",18446744073709551617,1.50,-0,1e400,'
        b'{"a":[null,true,false,{}]}]'
    )
    body = b'{"jsonrpc":"2.0","id":3,"method":"eth_call","params":' + params + b"}"
    resp = await go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    assert resp.status == 200
    ((method, seen),) = calls_seen(go_node)
    assert method == "eth_call"
    # same values, numbers with their literal digits (strings may be re-escaped)
    assert (
        seen
        == (
            '[{"to":"0x01","data":"0x\u00e9"},"latest",18446744073709551617,1.50,-0,1e400,'
            '{"a":[null,true,false,{}]}]'
        ).encode()
    )


async def test_absent_params_are_sent_as_an_empty_array(
    go_client: Client, go_node: MockNode, api_key: str
) -> None:
    for body in (
        b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}',
        b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":null}',
    ):
        resp = await go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
        assert resp.status == 200
    assert calls_seen(go_node) == [("eth_chainId", b"[]")] * 2


async def test_allowlist_and_weights_use_the_validated_method(
    make_config: MakeConfig, aiohttp_client: Any, go_node: MockNode, store: Store, account: str
) -> None:
    client = await _client(
        make_config,
        aiohttp_client,
        go_node,
        plans={"free": {"weights": {"eth_getLogs": 50, "debug_traceTransaction": 500}}},
    )
    key, rec = await store.create_key(account, methods=["eth_chainId"])
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","Method":"eth_getLogs"}'
    resp = await client.post(f"/bsc/{key}", data=body, headers=JSON)
    assert resp.status == 200
    resp = await client.post(f"/bsc/{key}", data=b"[" + body + b"]", headers=JSON)
    assert resp.status == 200
    # what was billed and allowed is what ran: eth_chainId, one unit each
    assert calls_seen(go_node) == [("eth_chainId", b"[]")] * 2
    await settle(client.app)
    usage = await store.usage(rec.id)
    assert usage.compute_units == 2 and usage.methods == {"eth_chainId": 2}


@pytest.mark.parametrize(
    "raw_id",
    [b"9007199254740993", b"18446744073709551616", b"-9007199254740993", b'"s"', b"null", b"7"],
)
@pytest.mark.parametrize("ids", ["js", "refuse_null", "echo"])
async def test_client_ids_survive_any_node(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, raw_id: bytes, ids: str
) -> None:
    node = await _node(ids=ids)
    try:
        client = await _client(make_config, aiohttp_client, node)
        single = b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"eth_chainId"}'
        resp = await client.post(f"/bsc/{api_key}", data=single, headers=JSON)
        assert resp.status == 200
        assert await resp.read() == b'{"jsonrpc":"2.0","id":' + raw_id + b',"result":"0x38"}'
        batch = b"[" + single + b"," + single.replace(b"eth_chainId", b"net_version") + b"]"
        resp = await client.post(f"/bsc/{api_key}", data=batch, headers=JSON)
        assert resp.status == 200
        assert await resp.read() == (
            b'[{"jsonrpc":"2.0","id":' + raw_id + b',"result":"0x38"},'
            b'{"jsonrpc":"2.0","id":' + raw_id + b',"result":"56"}]'
        )
    finally:
        await node.close()


async def test_id_beyond_double_range_is_valid_json(client: Client, api_key: str) -> None:
    body = b'{"jsonrpc":"2.0","id":1.5e400,"method":"eth_chainId"}'
    resp = await client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    assert resp.status == 200
    assert await resp.read() == b'{"jsonrpc":"2.0","id":1.5e400,"result":"0x38"}'


@pytest.mark.parametrize(
    "raw",
    [b"<html><body>502 Bad Gateway</body></html>", b'{"jsonrpc":"2.0","id":', b"[]", b"null"],
)
async def test_a_node_answer_that_is_not_json_rpc_is_502(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, raw: bytes
) -> None:
    node = await _node()
    try:
        client = await _client(make_config, aiohttp_client, node)
        # in service after its start-up check (the next probe is 60 s away); from now on junk
        node.options = dataclasses.replace(node.options, raw_answer=raw)
        resp = await client.post(
            f"/bsc/{api_key}", data=b'{"jsonrpc":"2.0","id":9,"method":"eth_chainId"}', headers=JSON
        )
        assert resp.status == 502
        assert await resp.json() == {
            "jsonrpc": "2.0",
            "id": 9,
            "error": {"code": -32603, "message": "Upstream unavailable"},
        }
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        batch = b'[{"jsonrpc":"2.0","id":9,"method":"eth_chainId"}]'
        resp = await client.post(f"/bsc/{api_key}", data=batch, headers=JSON)
        if raw == b"[]":  # valid JSON-RPC batch answer without our call: per-call error
            assert resp.status == 200
            assert (await resp.json())[0]["error"]["code"] == -32603
        else:
            assert resp.status == 502
            assert [a["id"] for a in await resp.json()] == [9]
    finally:
        await node.close()


@pytest.mark.parametrize("path", ["/bsc/", "/bsc/{key}/extra", "/opbnb/a/b/c", "/bsc//"])
async def test_other_paths_under_a_prefix_are_401_json(
    client: Client, api_key: str, path: str
) -> None:
    url = path.format(key=api_key)
    call = b'{"jsonrpc":"2.0","id":4,"method":"eth_chainId"}'
    resp = await client.post(url, data=call, headers={**JSON, "Authorization": f"Bearer {api_key}"})
    assert resp.status == 401
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert await resp.json() == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32001, "message": "Invalid authentication credentials"},
    }


# -- property: what a Go node decodes is what the gateway validated (item 12) -----
OFFERED = ["eth_chainId", "eth_call", "eth_getBalance", "eth_getLogs", "net_version"]
FORBIDDEN = ["debug_traceTransaction", "admin_addPeer", "personal_sign", "eth_blockNumber"]


def _case_variants(name: str) -> st.SearchStrategy[str]:
    """``name`` in any letter case, sometimes with a character Go folds onto a letter."""
    folds = {"s": "\u017f", "k": "\u212a"}

    def build(flags: list[int]) -> str:
        out = []
        for ch, flag in zip(name, flags, strict=True):
            if flag == 2 and ch in folds:
                out.append(folds[ch])
            else:
                out.append(ch.upper() if flag else ch)
        return "".join(out)

    return st.lists(st.integers(0, 2), min_size=len(name), max_size=len(name)).map(build)


_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_values = st.recursive(
    _leaf,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=8,
)
_id_values = (
    st.integers(-(2**70), 2**70)
    | st.text(max_size=6)
    | st.none()
    | st.builds(lambda v: {"id": v}, st.integers())  # nested: an invalid id
)
_member_names = st.sampled_from(["jsonrpc", "id", "method", "params"]).flatmap(_case_variants)


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # raw unicode; names go escaped


@st.composite
def _raw_call(draw: st.DrawFn) -> bytes:
    """One request object as raw JSON text: valid core, hostile extras, duplicates."""
    members: list[tuple[str, str]] = [
        ("jsonrpc", '"2.0"'),
        ("method", _text(draw(st.sampled_from(OFFERED + FORBIDDEN[:1])))),
    ]
    if draw(st.booleans()):
        members.append(("id", _text(draw(_id_values))))
    if draw(st.booleans()):
        members.append(("params", _text(draw(st.lists(_values, max_size=3)))))
    for _ in range(draw(st.integers(0, 4))):
        name = draw(_member_names | st.text(max_size=6))
        if name.casefold() == "method" or draw(st.booleans()):
            value = _text(draw(st.sampled_from(OFFERED + FORBIDDEN)))
        else:
            value = _text(draw(_values))
        members.insert(draw(st.integers(0, len(members))), (name, value))
    return ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in members) + "}").encode()


_bodies = _raw_call() | st.lists(_raw_call(), min_size=1, max_size=4).map(
    lambda items: b"[" + b",".join(items) + b"]"
)


@pytest.fixture
async def roomy_go_client(
    make_config: MakeConfig, aiohttp_client: Any, go_node: MockNode
) -> Client:
    return await _client(
        make_config, aiohttp_client, go_node, plans={"free": {"rate": 100000, "burst": 100000}}
    )


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_bodies)
@example(body=b'{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[null,0]}')
async def test_go_node_decodes_exactly_the_validated_calls(
    roomy_go_client: Client, go_node: MockNode, api_key: str, body: bytes
) -> None:
    go_node.received.clear()
    resp = await roomy_go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    assert resp.status in (200, 204), await resp.read()
    parsed = rpc.parse_body(body)
    objs = parsed if isinstance(parsed, list) else [parsed]
    methods = frozenset(OFFERED)
    validated = [rpc.validate_call(o, methods) for o in objs]
    pool = roomy_go_client.app[POOLS]["bsc"]
    want = [
        (c.method, orjson.dumps([] if c.params is None else c.params))
        for c in validated
        if c.error is None and not _answered_from_history(pool, c.method, c.params)
    ]
    assert calls_seen(go_node) == want
    assert all(method in methods for method, _ in calls_seen(go_node))


def _answered_from_history(pool: NodePool, method: str, params: Any) -> bool:
    """Whether the gateway answers this state read itself: no node in service keeps its block.

    Such a call is refused in a pruned node's words without reaching a node
    (gateway/rpc/history.py), so it is rightly absent from what the node saw.
    """
    block = pool.eligibility.state_block(method, params, pool.nodes)
    return block >= 0 and not pool.eligibility.holder_in_service(block, pool.nodes)


async def test_a_state_read_of_a_pruned_block_never_reaches_the_node(
    roomy_go_client: Client, go_node: MockNode, api_key: str
) -> None:
    """The example that once failed the property above: ``eth_call [null, 0]``.

    Block 0 is older than the node's ``state_blocks``, so the gateway answers
    it in geth's words without asking; the property must expect exactly that.
    """
    go_node.received.clear()
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[null,0]}'
    resp = await roomy_go_client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    answer = await resp.json()
    assert _answered_from_history(roomy_go_client.app[POOLS]["bsc"], "eth_call", [None, 0])
    assert answer["error"]["message"].startswith("missing trie node"), answer
    assert calls_seen(go_node) == []
