"""Filters kept by the gateway through the real app.

Real chain mock nodes (``gateway.demo.chainnode``: the test mines and
re-organises), the real app on a real port, the real Redis. The probe runs
at start-up only; tests move the chain and call ``pool.probe_once()``.
The chain node puts one log in every block (address 0x22..22).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config, FiltersConfig
from gateway.demo.chainnode import Chain, ChainNode, start_chain_node
from gateway.filters.service import FilterService
from gateway.filters.store import FilterStore
from gateway.intel.head import HeadTracker, NetworkHead
from gateway.redis import keyspace as ks
from gateway.redis.embedded import free_port
from gateway.rpc import protocol
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import MakeConfig
from tests.helpers.waiting import eventually

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
ROOMY = {"free": {"rate": 100_000, "burst": 100_000}}
EMITTER = "0x" + "22" * 20


@pytest.fixture
def chain() -> Chain:
    return Chain(chain_id=56, start=5_000, finality_depth=6, safe_depth=1)


@pytest.fixture
async def nodes(chain: Chain) -> AsyncIterator[list[ChainNode]]:
    started = [await start_chain_node(chain), await start_chain_node(chain)]
    yield started
    for node in started:
        await node.close()


AppFactory = Callable[..., Any]


@pytest.fixture
def make_app(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], nodes: list[ChainNode]
) -> AppFactory:
    async def make(raw: dict[str, Any] | None = None) -> Client:
        raw = dict(raw or {})
        cfg: Config = make_config(
            {
                "plans": raw.pop("plans", ROOMY),
                "upstream": {"probe_interval_s": 60, "max_lag_blocks": 1000},
                "cache": {"coalesce": True},
                **raw,
            },
            upstreams={"bsc": [n.url for n in nodes]},
        )
        client: Client = await aiohttp_client(TestServer(create_app(cfg)))
        await client.app[T.POOLS]["bsc"].probe_once()
        return client

    return make


async def rpc(client: Client, key: str, method: str, params: Any, id_: Any = 1) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
    resp = await client.post(f"/bsc/{key}", data=orjson.dumps(body), headers=JSON)
    answer: dict[str, Any] = orjson.loads(await resp.read())
    answer["_status"] = resp.status
    return answer


async def moved(client: Client, chain: Chain, blocks: int) -> None:
    chain.advance(blocks)
    await client.app[T.POOLS]["bsc"].probe_once()


def numbers(logs: list[dict[str, Any]]) -> list[int]:
    return [int(log["blockNumber"], 16) for log in logs]


async def test_a_logs_filter_reports_each_new_log_once(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    made = await rpc(client, api_key, "eth_newFilter", [{"address": EMITTER}], id_="f")
    fid = made["result"]
    assert made["id"] == "f" and len(fid) == 34 and fid.startswith("0x")
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []
    await moved(client, chain, 3)
    logs = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    assert numbers(logs) == [5_001, 5_002, 5_003]
    assert [log["blockHash"] for log in logs] == [
        chain.block_hash(n) for n in (5_001, 5_002, 5_003)
    ]
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []
    await moved(client, chain, 1)
    assert numbers(
        (await rpc(client, api_key, "eth_getFilterChanges", [fid.upper()]))["result"]
    ) == [5_004]
    # eth_getFilterLogs: the filter's whole range (fromBlock defaults to latest)
    assert numbers((await rpc(client, api_key, "eth_getFilterLogs", [fid]))["result"]) == [5_004]
    assert (await rpc(client, api_key, "eth_uninstallFilter", [fid]))["result"] is True
    assert (await rpc(client, api_key, "eth_uninstallFilter", [fid]))["result"] is False
    gone = await rpc(client, api_key, "eth_getFilterChanges", [fid])
    assert gone["error"] == {"code": -32000, "message": "filter not found"}


async def test_another_key_gets_filter_not_found(
    make_app: AppFactory, chain: Chain, api_key: str, store: Store, account: str
) -> None:
    client = await make_app()
    other, _ = await store.create_key(account, name="other")
    fid = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    for method in ("eth_getFilterChanges", "eth_getFilterLogs"):
        answer = await rpc(client, other, method, [fid], id_=7)
        assert answer["_status"] == 200 and answer["id"] == 7
        assert answer["error"] == {"code": -32000, "message": "filter not found"}
    assert (await rpc(client, other, "eth_uninstallFilter", [fid]))["result"] is False
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getFilterChanges", "params": [fid]}
    resp = await client.post(f"/opbnb/{api_key}", data=orjson.dumps(body), headers=JSON)
    assert (await resp.json())["error"]["message"] == "filter not found"  # another network
    for junk in (["0x1234"], ["nope"], [12], [None]):
        answer = await rpc(client, api_key, "eth_getFilterChanges", junk)
        assert answer["error"]["message"] == "filter not found", junk
    # the owner's filter is untouched by all that
    await moved(client, chain, 2)
    hashes = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    assert hashes == [chain.block_hash(5_001), chain.block_hash(5_002)]


async def test_logs_of_a_reorganised_block_come_back_removed(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    fid = (await rpc(client, api_key, "eth_newFilter", [{"address": EMITTER}]))["result"]
    await moved(client, chain, 3)
    first = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    old = {int(log["blockNumber"], 16): log["blockHash"] for log in first}
    chain.reorg(2)  # 5002 and 5003 replaced
    await moved(client, chain, 1)
    logs = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    removed = [log for log in logs if log["removed"]]
    added = [log for log in logs if not log["removed"]]
    assert [(int(g["blockNumber"], 16), g["blockHash"]) for g in removed] == [
        (5_002, old[5_002]),
        (5_003, old[5_003]),
    ]
    assert numbers(added) == [5_002, 5_003, 5_004]  # 5001 stayed canonical: not sent again
    assert all(g["blockHash"] == chain.block_hash(int(g["blockNumber"], 16)) for g in added)
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []


async def test_a_block_filter_follows_a_reorg_of_the_tip(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    fid = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    await moved(client, chain, 2)
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == [
        chain.block_hash(5_001),
        chain.block_hash(5_002),
    ]
    chain.reorg(1)
    await client.app[T.POOLS]["bsc"].probe_once()
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == [
        chain.block_hash(5_002)  # the new tip at the same height
    ]


async def test_a_poll_spans_at_most_the_plans_logs_range(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app({"plans": {"free": {"rate": 100_000, "max_logs_range": 5}}})
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    await moved(client, chain, 12)
    got = [
        numbers((await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"])
        for _ in range(4)
    ]
    assert got == [
        list(range(5_001, 5_006)),
        list(range(5_006, 5_011)),
        [5_011, 5_012],
        [],
    ]
    # eth_getFilterLogs over a range wider than the plan's: the guard's -32602
    wide = (await rpc(client, api_key, "eth_newFilter", [{"fromBlock": hex(4_000)}]))["result"]
    refused = await rpc(client, api_key, "eth_getFilterLogs", [wide])
    assert refused["error"]["code"] == -32602, refused
    assert refused["error"]["data"]["max_logs_range"] == 5


async def test_live_filters_per_key_are_capped_and_expire(
    make_app: AppFactory, api_key: str, redis: Redis, prefix: str
) -> None:
    client = await make_app({"filters": {"max_per_key": 2, "ttl_s": 0.3}})
    a = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    third = await rpc(client, api_key, "eth_newFilter", [{}])
    assert third["error"]["code"] == -32000
    assert third["error"]["message"] == f"too many filters: {third['error']['data']['reason']}"
    assert third["error"]["data"]["max_filters"] == 2
    assert (await rpc(client, api_key, "eth_uninstallFilter", [a]))["result"] is True
    b = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]  # room again
    keys = await redis.keys(f"{prefix}:*:f:{b}")
    assert len(keys) == 1 and 0 < await redis.pttl(keys[0]) <= 300

    # geth's 5 minutes, scaled down by config; a poll would keep it alive, so
    # the wait watches the filter's state in Redis
    async def expired() -> bool:
        return not await redis.exists(keys[0])

    await eventually(expired, 5.0, "the unpolled filter to expire")
    assert (await rpc(client, api_key, "eth_getFilterChanges", [b]))["error"]["message"] == (
        "filter not found"
    )
    assert (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]  # expired ones free room


async def test_a_poll_costs_its_methods_weight_never_free(
    make_app: AppFactory, api_key: str
) -> None:
    """A poll costs eth_getFilterChanges' weight (1), eth_getFilterLogs eth_getLogs' (3)."""
    client = await make_app({"plans": {"free": {"rate": 0.001, "burst": 6}}})
    fid = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]  # 1 unit
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []  # 1
    assert (await rpc(client, api_key, "eth_getFilterLogs", [fid]))["error"]  # 3 (no log filter)
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []  # 1
    refused = await rpc(client, api_key, "eth_getFilterChanges", [fid])
    assert refused["_status"] == 429 and refused["error"]["code"] == -32005


async def test_a_filter_survives_a_node_failover_and_another_gateway_process(
    make_app: AppFactory, chain: Chain, nodes: list[ChainNode], api_key: str
) -> None:
    first = await make_app()
    fid = (await rpc(first, api_key, "eth_newFilter", [{"address": [EMITTER]}]))["result"]
    await moved(first, chain, 2)
    seen = numbers((await rpc(first, api_key, "eth_getFilterChanges", [fid]))["result"])
    await nodes[0].close()  # a node goes away ...
    second = await make_app()  # ... and the next poll lands on another process
    await moved(second, chain, 2)
    seen += numbers((await rpc(second, api_key, "eth_getFilterChanges", [fid]))["result"])
    await moved(first, chain, 1)
    seen += numbers((await rpc(first, api_key, "eth_getFilterChanges", [fid]))["result"])
    assert seen == list(range(5_001, 5_006))  # every log exactly once


async def test_with_no_node_in_service_polls_answer_502_not_an_empty_change_list(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    """The gateway never serves a head it cannot vouch for, filters included."""
    client = await make_app()
    blocks = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    logs = (await rpc(client, api_key, "eth_newFilter", [{"address": [EMITTER]}]))["result"]
    for node in nodes:
        await node.close()
    await client.app[T.POOLS]["bsc"].probe_once()  # every node out of service
    for fid in (blocks, logs):
        answer = await rpc(client, api_key, "eth_getFilterChanges", [fid])
        assert answer["_status"] == 502 and answer["error"]["code"] == -32603, answer
        # a reason in error.data as everywhere else: an object, never a bare string
        assert answer["error"]["data"] == {"reason": "no upstream node in service"}, answer
    answer = await rpc(client, api_key, "eth_newBlockFilter", [])
    assert answer["_status"] == 502 and "result" not in answer, answer


async def test_filter_calls_in_a_batch_and_bad_params(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    many = ["0x" + f"{i:040x}" for i in range(1001)]
    body = [
        {"jsonrpc": "2.0", "id": 1, "method": "eth_newBlockFilter", "params": []},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_blockNumber", "params": []},
        {"jsonrpc": "2.0", "id": 3, "method": "eth_getFilterChanges", "params": ["0x" + "0" * 32]},
        {"jsonrpc": "2.0", "id": 4, "method": "eth_newFilter", "params": [{"topics": "x"}]},
        {"jsonrpc": "2.0", "id": 5, "method": "eth_newPendingTransactionFilter", "params": []},
        # geth's cap on a filter's addresses (the filters' old reader had it too)
        {"jsonrpc": "2.0", "id": 6, "method": "eth_newFilter", "params": [{"address": many}]},
    ]
    resp = await client.post(f"/bsc/{api_key}", data=orjson.dumps(body), headers=JSON)
    assert resp.status == 200
    answers = orjson.loads(await resp.read())
    assert [a["id"] for a in answers] == [1, 2, 3, 4, 5, 6]
    assert answers[0]["result"].startswith("0x") and answers[1]["result"] == hex(5_000)
    assert answers[2]["error"] == {"code": -32000, "message": "filter not found"}
    assert answers[3]["error"]["code"] == -32602
    assert answers[4]["error"] == {
        "code": -32601,
        "message": "the method eth_newPendingTransactionFilter does not exist/is not available",
    }
    assert answers[5]["error"]["code"] == -32602
    assert answers[5]["error"]["data"]["reason"].startswith("invalid argument 0: exceed max addr")


async def test_a_filter_made_over_websocket_is_polled_over_http(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    async with client.ws_connect(f"/bsc/{api_key}") as ws:
        await ws.send_bytes(b'{"jsonrpc":"2.0","id":9,"method":"eth_newBlockFilter","params":[]}')
        made = orjson.loads(await ws.receive_str(timeout=5))
    assert made["id"] == 9
    await moved(client, chain, 1)
    changes = await rpc(client, api_key, "eth_getFilterChanges", [made["result"]])
    assert changes["result"] == [chain.block_hash(5_001)]


async def test_two_polls_racing_never_deliver_the_same_logs_twice(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    other_process = await make_app()
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    for _ in range(3):
        await moved(client, chain, 2)
        await other_process.app[T.POOLS]["bsc"].probe_once()
        a, b = await asyncio.gather(
            rpc(client, api_key, "eth_getFilterChanges", [fid]),
            rpc(other_process, api_key, "eth_getFilterChanges", [fid]),
        )
        got = sorted(numbers(a["result"]) + numbers(b["result"]))
        assert got == [chain.head - 1, chain.head]


async def test_redis_unavailable_answers_503_not_a_traceback(chain: Chain) -> None:
    """Filter state is in Redis: when it cannot be reached the call fails closed."""
    dead = Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    heads = HeadTracker(["n"])
    heads.head = NetworkHead(chain.head, chain.block_hash(chain.head))

    async def never(method: str, params: list[Any]) -> bytes:
        raise AssertionError("no node call expected")

    service = FilterService(
        "bsc", FilterStore(dead, "gw", 300, 10), heads, never, FiltersConfig(), lambda plan: 0
    )
    try:
        for method, params in (
            ("eth_newBlockFilter", []),
            ("eth_getFilterChanges", ["0x" + "ab" * 16]),
            ("eth_uninstallFilter", ["0x" + "ab" * 16]),
        ):
            answer = await service.answer("h" * 64, "free", method, params)
            assert answer == (protocol.SERVICE_UNAVAILABLE, None), method
    finally:
        await dead.aclose()


async def test_bscs_finalized_header_filter_reports_the_newest_finalized_block(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    client = await make_app()
    fid = (await rpc(client, api_key, "eth_newFinalizedHeaderFilter", []))["result"]
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []
    await moved(client, chain, 3)
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == [
        chain.block_hash(chain.finalized)
    ]
    assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []
    # opBNB has no such method (BSC's finality API only)
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_newFinalizedHeaderFilter", "params": []}
    resp = await client.post(f"/opbnb/{api_key}", data=orjson.dumps(body), headers=JSON)
    assert (await resp.json())["error"]["code"] == -32601


async def test_a_lone_poll_whose_node_read_failed_keeps_its_http_status(
    make_app: AppFactory, chain: Chain, nodes: list[ChainNode], api_key: str
) -> None:
    """502 for a single call (as any forwarded read); in a batch the error takes its place."""
    client = await make_app()
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    other = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    await moved(client, chain, 2)
    for node in nodes:
        await node.close()
    failed = await rpc(client, api_key, "eth_getFilterChanges", [fid], id_="p")
    assert failed["_status"] == 502 and failed["id"] == "p"
    assert failed["error"]["code"] == -32603
    body = [
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getFilterChanges", "params": [fid]},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_uninstallFilter", "params": [fid]},
    ]
    resp = await client.post(f"/bsc/{api_key}", data=orjson.dumps(body), headers=JSON)
    answers = orjson.loads(await resp.read())
    assert resp.status == 200
    assert answers[0]["error"]["code"] == -32603 and answers[1]["result"] is True
    # over a socket the failure is the call's answer too
    async with client.ws_connect(f"/bsc/{api_key}") as ws:
        await ws.send_json(
            {"jsonrpc": "2.0", "id": 3, "method": "eth_getFilterChanges", "params": [other]}
        )
        answer = await ws.receive_json(timeout=5)
    assert answer["id"] == 3 and answer["error"]["code"] == -32603


async def test_the_live_filters_gauge_follows_create_uninstall_and_expiry(
    make_app: AppFactory, api_key: str
) -> None:
    client = await make_app({"filters": {"ttl_s": 0.3}})
    registry = client.app[METRICS].registry
    assert registry.get_sample_value("gateway_filters_live", {"network": "bsc"}) == 0
    a = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    b = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    assert registry.get_sample_value("gateway_filters_live", {"network": "bsc"}) == 2
    assert (await rpc(client, api_key, "eth_uninstallFilter", [a]))["result"] is True
    assert registry.get_sample_value("gateway_filters_live", {"network": "bsc"}) == 1
    await asyncio.sleep(0.4)  # b expires (in Redis and here)
    c = (await rpc(client, api_key, "eth_newBlockFilter", []))["result"]
    assert registry.get_sample_value("gateway_filters_live", {"network": "bsc"}) == 1  # c only
    assert (await rpc(client, api_key, "eth_getFilterChanges", [b]))["error"]["code"] == -32000
    assert c != b and registry.get_sample_value("gateway_filters_live", {"network": "bsc"}) == 1
    scraped = client.app[METRICS].exposition().decode()
    assert 'gateway_filters_live{network="bsc"} 1.0' in scraped


async def test_identical_polls_at_one_head_cost_one_node_scan(
    make_app: AppFactory, chain: Chain, nodes: list[ChainNode], api_key: str
) -> None:
    """A poll's eth_getLogs goes through the pipeline's read path: coalesced and cached."""
    client = await make_app()
    fids = [
        (await rpc(client, api_key, "eth_newFilter", [{"address": EMITTER}]))["result"]
        for _ in range(4)
    ]
    await moved(client, chain, 2)
    before = sum(n.by_method["eth_getLogs"] for n in nodes)
    polls = await asyncio.gather(*(rpc(client, api_key, "eth_getFilterChanges", [f]) for f in fids))
    assert all(numbers(p["result"]) == [5_001, 5_002] for p in polls)
    assert sum(n.by_method["eth_getLogs"] for n in nodes) - before == 1


async def test_filter_logs_are_relayed_like_get_logs_not_read_whole(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    """eth_getFilterLogs over many blocks: the node's answer goes to the client as an
    eth_getLogs answer does (relayed in pieces past 1 MiB), whatever
    limits.max_buffered_answer_bytes says: the gateway never reads it whole (before:
    read whole up to that bound, 502 past it)."""
    for limit in (64 << 20, 1 << 20):
        client = await make_app({"limits": {"max_buffered_answer_bytes": limit}})
        flt = [{"fromBlock": hex(1_000)}]
        fid = (await rpc(client, api_key, "eth_newFilter", flt))["result"]
        logs = (await rpc(client, api_key, "eth_getFilterLogs", [fid], id_="x"))["result"]
        assert numbers(logs) == list(range(1_000, 5_001))
        assert len(orjson.dumps(logs)) > 1 << 20  # past relay.STREAM_OVER: relayed


async def test_a_poll_too_large_for_one_answer_is_split_not_stuck(
    make_app: AppFactory, chain: Chain, api_key: str
) -> None:
    """A poll whose logs are past limits.max_buffered_answer_bytes asks for half the
    blocks, then half again, until it goes through; the rest follows in later polls,
    every log once, none lost (it was a 502 on every poll, forever)."""
    client = await make_app(
        {
            "plans": {"free": {"rate": 100_000, "burst": 100_000, "max_logs_range": 20_000}},
            "limits": {"max_buffered_answer_bytes": 1 << 20},
        }
    )
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    await moved(client, chain, 8_000)
    got: list[int] = []
    polls = 0
    while len(got) < 8_000 and polls < 20:
        answer = await rpc(client, api_key, "eth_getFilterChanges", [fid])
        assert answer["_status"] == 200, answer
        got += numbers(answer["result"])
        polls += 1
    assert got == list(range(5_001, 13_001))
    assert polls > 2  # 8,000 blocks of logs are more than 1 MiB: split over polls


async def test_filter_expiry_is_on_redis_clock_not_the_process_clock(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes whose clocks disagree by a day still agree on which filters count
    against the cap: the index is kept on Redis's TIME."""
    store = FilterStore(redis, prefix, ttl_s=300, max_per_key=1)
    khash = "ab" * 32
    monkeypatch.setattr(time, "time", lambda: 86_400.0)  # a process clock stuck in 1970
    first = await store.create(khash, "bsc", "blocks", {}, 1, [])
    assert isinstance(first, str)
    assert await store.create(khash, "bsc", "blocks", {}, 1, []) == 0  # at the cap
    seconds, micros = await redis.time()
    now_ms = seconds * 1000 + micros // 1000
    index: list[Any] = await redis.zrange(ks.filter_index(prefix, khash), 0, -1, withscores=True)
    ((member, expiry),) = index
    assert (member.decode() if isinstance(member, bytes) else member) == first
    assert abs(float(expiry) - (now_ms + 300_000)) < 5_000
