"""Upstream intelligence through the real app: hedges, one head, cache, coalescing, logs guard.

Real chain mock nodes (``gateway.demo.chainnode``) on real ports, the real
app, the real Redis. The probe runs once at start-up (interval 60 s); tests
move the chain and call ``pool.probe_once()`` themselves, so no test sleeps
for a probe. Node call counts leave the probe's own calls out by reading
them before and after, with no probe in between.
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

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config
from gateway.demo.chainnode import Chain, ChainNode, start_chain_node
from gateway.telemetry.metrics import METRICS
from gateway.upstream.pool import NodePool
from tests.helpers.config import MakeConfig
from tests.helpers.txs import sender_account, signed

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
ROOMY = {"free": {"rate": 100_000, "burst": 100_000}}


@pytest.fixture
def chain() -> Chain:
    return Chain(chain_id=56, start=20_000, finality_depth=3, safe_depth=1)


@pytest.fixture
async def nodes(chain: Chain) -> AsyncIterator[list[ChainNode]]:
    """A fresh node and one 50 blocks behind."""
    started = [await start_chain_node(chain), await start_chain_node(chain, lag=50)]
    yield started
    for node in started:
        node.hold_s = None
        await node.close()


AppFactory = Callable[..., Any]


@pytest.fixture
def make_app(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], nodes: list[ChainNode]
) -> AppFactory:
    async def make(
        raw: dict[str, Any] | None = None, urls: list[str] | None = None
    ) -> tuple[Client, NodePool]:
        raw = dict(raw or {})
        upstream = {"probe_interval_s": 60, "max_lag_blocks": 1000, **raw.pop("upstream", {})}
        cfg: Config = make_config(
            {"plans": ROOMY, "upstream": upstream, **raw},
            upstreams={"bsc": urls or [n.url for n in nodes]},
        )
        client: Client = await aiohttp_client(TestServer(create_app(cfg)))
        pool = client.app[T.POOLS]["bsc"]
        await pool.probe_once()  # heads known before the first call, whatever the task did
        return client, pool

    return make


async def rpc(client: Client, key: str, method: str, params: Any, id_: Any = 1) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
    resp = await client.post(f"/bsc/{key}", data=orjson.dumps(body), headers=JSON)
    assert resp.status in (200, 429, 504), await resp.text()
    answer: dict[str, Any] = orjson.loads(await resp.read())
    answer["_status"] = resp.status
    return answer


def seen(nodes: list[ChainNode], method: str) -> list[int]:
    return [n.by_method[method] for n in nodes]


# -- 1. hedged reads -------------------------------------------------------------
async def test_hedged_reads_answer_fast_and_writes_are_never_hedged(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    nodes[1].lag = 0
    client, pool = await make_app(
        {"upstream": {"attempt_timeout_s": 1.5}, "networks": {"bsc": {"tx_broadcast": "one"}}}
    )
    nodes[1].hold_s = 5.0  # every answer of the second node now takes 5 s
    slowest = 0.0
    for i in range(20):
        started = time.perf_counter()
        call = {"to": "0x" + "11" * 20, "data": hex(i)}  # distinct: no cache, no coalescing
        answer = await rpc(client, api_key, "eth_call", [call, "latest"], id_=i)
        slowest = max(slowest, time.perf_counter() - started)
        assert answer["id"] == i and "result" in answer
    assert slowest < 1.0, slowest
    stats = pool.intel.hedge_stats
    assert stats.hedges >= 1 and seen(nodes, "eth_call")[1] >= 1  # the slow node was asked
    assert stats.hedges_won >= 1
    # Writes: never hedged, never sent twice; the one on the held node times out.
    # (tx_broadcast = "one": a raw transaction is forwarded like any call; the default
    # broadcast to every node is tests/integration/test_transactions.py's.)
    for i in range(2):
        raw = signed(sender_account(100 + i))
        await rpc(client, api_key, "eth_sendRawTransaction", [raw], id_=i)
    # each sent once, to one node (which one is the pool's pick: the held node's head
    # has gone stale, so it may get neither)
    assert sum(seen(nodes, "eth_sendRawTransaction")) == 2
    await pool.probe_once()  # syncs the metrics
    text = client.app[METRICS].exposition().decode()
    assert 'gateway_hedges_total{network="bsc",result="sent"}' in text


# -- 2. one head per network -----------------------------------------------------
@pytest.mark.parametrize("cache", [True, False])
async def test_block_number_never_decreases_with_a_lagging_node(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str, cache: bool
) -> None:
    client, pool = await make_app({"cache": {"enabled": cache}})
    answers = []
    for i in range(12):
        if i % 3 == 0:
            chain.advance()
            await pool.probe_once()
        answer = await rpc(client, api_key, "eth_blockNumber", [], id_=f"n{i}")
        assert answer["id"] == f"n{i}"
        answers.append(int(answer["result"], 16))
    assert answers == sorted(answers), answers
    assert min(answers) >= 20_001  # never the lagging node's own head
    assert seen(nodes, "eth_blockNumber")[1] >= 1  # the lagging node did serve calls
    await pool.probe_once()
    text = client.app[METRICS].exposition().decode()
    assert 'gateway_upstream_head_lag_blocks{network="bsc",node="bsc-1"} 50.0' in text
    assert 'gateway_network_head_block{mark="finalized",network="bsc"}' in text


async def test_a_block_above_a_nodes_head_goes_to_a_node_that_has_it(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str
) -> None:
    client, _ = await make_app({"cache": {"enabled": False}})
    before = seen(nodes, "eth_getBlockByNumber")
    for i in range(10):  # above the lagging node's head (head - 50)
        answer = await rpc(client, api_key, "eth_getBlockByNumber", [hex(chain.head - i), False])
        assert answer["result"]["number"] == hex(chain.head - i)
    after = seen(nodes, "eth_getBlockByNumber")
    assert after[1] == before[1] and after[0] == before[0] + 10
    for i in range(10):  # below both heads: the fresh node serves them all
        answer = await rpc(
            client, api_key, "eth_getBlockByNumber", [hex(chain.head - 60 - i), False]
        )
        assert answer["result"] is not None
    # the lagging node's head is older than head.stale_s: it is behind, takes no part
    # in the head and is asked for no block by number, even one it has
    assert seen(nodes, "eth_getBlockByNumber")[1] == after[1]


# -- 3. the cache ----------------------------------------------------------------
async def test_a_hit_passes_auth_and_the_limiter_and_never_reaches_a_node(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    client, pool = await make_app({"plans": {"free": {"rate": 0.001, "burst": 3}}})
    ids = [7, "seven", None]
    for id_ in ids:
        answer = await rpc(client, api_key, "eth_chainId", [], id_=id_)
        assert answer == {"jsonrpc": "2.0", "id": id_, "result": "0x38", "_status": 200}
    assert sum(seen(nodes, "eth_chainId")) == 1  # two hits
    assert (await rpc(client, api_key, "eth_chainId", [], id_=8))["_status"] == 429
    bad = await client.post(
        "/bsc/" + "A" * 32, data=b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}', headers=JSON
    )
    assert bad.status == 401
    big = (
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"eth_chainId","params":[]}'
    )
    client2, _ = await make_app()
    for _ in range(2):
        resp = await client2.post(f"/bsc/{api_key}", data=big, headers=JSON)
        assert (await resp.read()).startswith(
            b'{"jsonrpc":"2.0","id":123456789012345678901234567890,'
        )
    assert pool.intel.cache is not None and pool.intel.cache.stats.hits >= 2


async def test_a_reorganised_block_is_never_served_stale(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str
) -> None:
    client, pool = await make_app(urls=[nodes[0].url])
    before = nodes[0].by_method["eth_getBlockByNumber"]
    first = await rpc(client, api_key, "eth_getBlockByNumber", ["latest", False])
    again = await rpc(client, api_key, "eth_getBlockByNumber", ["latest", False], id_=2)
    by_number = await rpc(client, api_key, "eth_getBlockByNumber", [hex(chain.head), False])
    assert first["result"] == again["result"]
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 2  # latest once, by number once
    old_hash = first["result"]["hash"]
    chain.reorg(1)
    await pool.probe_once()
    assert chain.block_hash(chain.head) != old_hash
    for params in (["latest", False], [hex(chain.head), False]):
        answer = await rpc(client, api_key, "eth_getBlockByNumber", params)
        assert answer["result"]["hash"] == chain.block_hash(chain.head)
    assert by_number["result"]["hash"] == old_hash


async def test_final_blocks_stay_cached_as_the_head_moves(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str
) -> None:
    client, pool = await make_app(urls=[nodes[0].url])
    final = hex(chain.finalized)
    before = nodes[0].by_method["eth_getBlockByNumber"]
    await rpc(client, api_key, "eth_getBlockByNumber", [final, False])
    for _ in range(3):
        chain.advance()
        await pool.probe_once()
        answer = await rpc(client, api_key, "eth_getBlockByNumber", [final, False])
        assert answer["result"]["number"] == final
    # the three probes asked 3 calls each; the block itself was asked once
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 1 + 9
    cache = pool.intel.cache
    assert cache is not None and cache.bytes <= cache.max_bytes
    await pool.probe_once()
    text = client.app[METRICS].exposition().decode()
    assert (
        'gateway_cache_lookups_total{method="eth_getBlockByNumber",network="bsc",result="hit"} 3.0'
        in text
    )
    assert 'gateway_cache_bytes{network="bsc"}' in text


# -- 4. coalescing -----------------------------------------------------------------
async def test_identical_concurrent_calls_share_one_node_call(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    client, pool = await make_app()
    for node in nodes:
        node.hold_s = 0.3
    params = ["0x" + "22" * 20, "latest"]
    answers = await asyncio.gather(
        *(rpc(client, api_key, "eth_getBalance", params, id_=i) for i in range(20))
    )
    assert [a["id"] for a in answers] == list(range(20))
    assert len({a["result"] for a in answers}) == 1
    assert sum(seen(nodes, "eth_getBalance")) == 1
    assert pool.intel.coalescer is not None and pool.intel.coalescer.coalesced == 19


async def test_a_shared_failure_reaches_every_caller_once(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    client, pool = await make_app(
        {"limits": {"upstream_timeout_s": 0.4}, "upstream": {"attempt_timeout_s": 0.2}}
    )
    for node in nodes:
        node.hang = True
    answers = await asyncio.gather(
        *(rpc(client, api_key, "eth_gasPrice", [], id_=i) for i in range(10))
    )
    assert {a["_status"] for a in answers} == {504}
    assert [a["id"] for a in answers] == list(range(10))
    assert sum(seen(nodes, "eth_gasPrice")) <= pool.max_attempts  # one flight, not ten


# -- 5. the eth_getLogs guard ------------------------------------------------------
async def test_a_wide_get_logs_is_refused_before_any_node_sees_it(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    client, _ = await make_app()
    wide = {"fromBlock": "earliest", "toBlock": "latest"}
    answer = await rpc(client, api_key, "eth_getLogs", [wide], id_="logs")
    assert answer["_status"] == 200 and answer["id"] == "logs"
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["max_logs_range"] == 10_000
    assert answer["error"]["data"]["requested_range"] == 20_001
    reason = "eth_getLogs over 20001 blocks, the plan allows 10000"
    assert answer["error"]["message"] == f"Invalid params: {reason}"
    assert answer["error"]["data"]["reason"] == reason
    body = orjson.dumps(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [wide]},
            {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId", "params": []},
            {"jsonrpc": "2.0", "method": "eth_getLogs", "params": [wide]},  # notification
        ]
    )
    resp = await client.post(f"/bsc/{api_key}", data=body, headers=JSON)
    items = orjson.loads(await resp.read())
    assert [i["id"] for i in items] == [1, 2]
    assert items[0]["error"]["code"] == -32602 and items[1]["result"] == "0x38"
    narrow = {"fromBlock": hex(19_990), "toBlock": "latest"}
    ok = await rpc(client, api_key, "eth_getLogs", [narrow])
    assert len(ok["result"]) == 11
    assert seen(nodes, "eth_getLogs") in ([1, 0], [0, 1])  # only the narrow one


async def test_the_plans_own_logs_range_applies(
    make_app: AppFactory, nodes: list[ChainNode], api_key: str
) -> None:
    client, _ = await make_app({"plans": {"free": {**ROOMY["free"], "max_logs_range": 100}}})
    spec = {"fromBlock": hex(19_900), "toBlock": hex(20_000)}  # 101 blocks
    answer = await rpc(client, api_key, "eth_getLogs", [spec])
    assert answer["error"]["data"]["max_logs_range"] == 100
    assert sum(seen(nodes, "eth_getLogs")) == 0


async def test_a_batch_takes_its_hits_from_the_cache_and_forwards_the_rest(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str
) -> None:
    client, _ = await make_app(urls=[nodes[0].url])
    final = hex(chain.finalized)

    def batch(first_id: int) -> bytes:
        return orjson.dumps(
            [
                {"jsonrpc": "2.0", "id": first_id, "method": "eth_chainId", "params": []},
                {"jsonrpc": "2.0", "id": "g", "method": "eth_gasPrice", "params": []},
                {
                    "jsonrpc": "2.0",
                    "id": first_id + 1,
                    "method": "eth_getBlockByNumber",
                    "params": [final, False],
                },
            ]
        )

    before = nodes[0].by_method["eth_getBlockByNumber"]
    answers = []
    for first_id in (1, 10):
        resp = await client.post(f"/bsc/{api_key}", data=batch(first_id), headers=JSON)
        answers.append(orjson.loads(await resp.read()))
    assert [a["id"] for a in answers[1]] == [10, "g", 11]
    assert answers[1][0]["result"] == "0x38" and answers[1][2]["result"]["number"] == final
    assert [a["result"] for a in answers[0]] == [a["result"] for a in answers[1]]
    assert nodes[0].by_method["eth_chainId"] == 1
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 1
    assert nodes[0].by_method["eth_gasPrice"] == 2  # never cached
    # every call of a batch cached: no node call at all
    hits = orjson.dumps([{"jsonrpc": "2.0", "id": 5, "method": "eth_chainId", "params": []}])
    resp = await client.post(f"/bsc/{api_key}", data=hits, headers=JSON)
    assert orjson.loads(await resp.read()) == [{"jsonrpc": "2.0", "id": 5, "result": "0x38"}]
    assert nodes[0].by_method["eth_chainId"] == 1


async def test_the_redis_tier_shares_final_answers_between_workers(
    make_app: AppFactory, nodes: list[ChainNode], chain: Chain, api_key: str
) -> None:
    raw = {"cache": {"redis": True}}
    first, _ = await make_app(raw, urls=[nodes[0].url])
    second, pool2 = await make_app(raw, urls=[nodes[0].url])  # another worker: its own memory
    final, recent = hex(chain.finalized), hex(chain.head)
    before = nodes[0].by_method["eth_getBlockByNumber"]
    for params in ([final, False], [recent, False]):
        answer = await rpc(first, api_key, "eth_getBlockByNumber", params)
        assert answer["result"]["number"] == params[0]
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 2
    answer = await rpc(second, api_key, "eth_getBlockByNumber", [final, False], id_="w2")
    assert answer["id"] == "w2" and answer["result"]["number"] == final
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 2  # from Redis
    await rpc(second, api_key, "eth_getBlockByNumber", [recent, False])
    assert nodes[0].by_method["eth_getBlockByNumber"] == before + 3  # not final: not shared
    cache = pool2.intel.cache
    assert cache is not None and cache.stats.hits == 0  # the first read came from Redis
