"""The intel parts against real chain mock nodes over HTTP: heads, reorgs, lag, hangs.

The pool and handler integration comes later; here each building block is
driven by real nodes on real ports, wired the way docs/INTEL_DESIGN.md says
NodePool.forward will wire them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.demo.chainnode import Chain, ChainNode, start_chain_node
from gateway.intel.cache import ResponseCache, call_key
from gateway.intel.coalesce import Coalescer
from gateway.intel.head import PROBE_BODY, HeadTracker, parse_probe
from gateway.intel.hedge import Budget, HedgeStats, LatencyTracker, Launch, run_hedged, timed
from gateway.intel.policy import Kind, classify


@pytest.fixture
def chain() -> Chain:
    return Chain(chain_id=56, start=1_000, finality_depth=3, safe_depth=1)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def nodes(chain: Chain) -> AsyncIterator[list[ChainNode]]:
    started = [await start_chain_node(chain), await start_chain_node(chain, lag=5)]
    yield started
    for node in started:
        await node.close()


async def post(session: aiohttp.ClientSession, node: ChainNode, body: bytes) -> bytes:
    async with session.post(node.url, data=body) as resp:
        return await resp.read()


def call(method: str, params: list[Any], id_: int = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})


async def rpc(session: aiohttp.ClientSession, node: ChainNode, method: str, *params: Any) -> Any:
    reply = orjson.loads(await post(session, node, call(method, list(params))))
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["result"]


async def probe(session: aiohttp.ClientSession, heads: HeadTracker, node: ChainNode) -> bool:
    report = parse_probe(await post(session, node, PROBE_BODY))
    assert report is not None
    return heads.observe(node.url, report)


async def test_probe_reads_latest_safe_and_finalized(
    session: aiohttp.ClientSession, nodes: list[ChainNode], chain: Chain
) -> None:
    report = parse_probe(await post(session, nodes[0], PROBE_BODY))
    assert report is not None
    assert (report.number, report.safe, report.finalized) == (1_000, 999, 997)
    assert report.hash == chain.block_hash(1_000)
    lagging = parse_probe(await post(session, nodes[1], PROBE_BODY))
    assert lagging is not None and lagging.number == 995


async def test_the_chain_node_reorganises_and_lags(
    session: aiohttp.ClientSession, nodes: list[ChainNode], chain: Chain
) -> None:
    fresh, lagging = nodes
    tip = await rpc(session, fresh, "eth_getBlockByNumber", "latest", False)
    tx = tip["transactions"][0]
    balance = await rpc(session, fresh, "eth_getBalance", "0x" + "11" * 20, "latest")
    assert (await rpc(session, fresh, "eth_getTransactionReceipt", tx))["blockNumber"] == tip[
        "number"
    ]
    chain.reorg(1)
    new_tip = await rpc(session, fresh, "eth_getBlockByNumber", "latest", False)
    assert new_tip["number"] == tip["number"] and new_tip["hash"] != tip["hash"]
    assert await rpc(session, fresh, "eth_getTransactionByHash", tx) is None  # reorged away
    assert await rpc(session, fresh, "eth_getBalance", "0x" + "11" * 20, "latest") != balance
    assert await rpc(session, lagging, "eth_blockNumber") == hex(995)
    assert await rpc(session, lagging, "eth_getBlockByNumber", hex(996), False) is None
    with pytest.raises(RuntimeError, match="header not found"):
        await rpc(session, lagging, "eth_call", {"to": "0x1"}, hex(999))
    with pytest.raises(ValueError, match="finalized"):
        chain.reorg(4)  # below finality: refused


async def test_logs_and_receipts(
    session: aiohttp.ClientSession, nodes: list[ChainNode], chain: Chain
) -> None:
    logs = await rpc(session, nodes[0], "eth_getLogs", {"fromBlock": hex(990), "toBlock": hex(999)})
    assert [int(log["blockNumber"], 16) for log in logs] == list(range(990, 1_000))
    receipts = await rpc(session, nodes[0], "eth_getBlockReceipts", hex(990))
    assert receipts[0]["transactionHash"] == chain.tx_hash(990)
    chain.advance(20_000)
    with pytest.raises(RuntimeError, match="10000"):
        await rpc(session, nodes[0], "eth_getLogs", {"fromBlock": "earliest", "toBlock": "latest"})
    assert nodes[0].by_method["eth_getLogs"] == 2


async def test_a_reorg_never_serves_a_stale_cached_block(
    session: aiohttp.ClientSession, nodes: list[ChainNode], chain: Chain
) -> None:
    """Cache a latest block at one tip; after a reorg the probe changes the tag: miss."""
    fresh = nodes[0]
    heads = HeadTracker([n.url for n in nodes])
    cache = ResponseCache(1 << 20, 1 << 16)
    await probe(session, heads, fresh)
    params: list[Any] = ["latest", False]
    key = call_key("eth_getBlockByNumber", params)

    async def read() -> tuple[bytes, bool]:
        head = heads.head
        policy = classify("eth_getBlockByNumber", params, head)
        hit = cache.get("eth_getBlockByNumber", key, policy, head)
        if hit is not None:
            return hit, True
        result = orjson.dumps(await rpc(session, fresh, "eth_getBlockByNumber", *params))
        cache.put(key, policy, head, result, node_head=heads.node_head(fresh.url))
        return result, False

    before = fresh.by_method["eth_getBlockByNumber"]  # the probe asks by number too
    first, hit = await read()
    assert not hit
    again, hit = await read()
    assert hit and again == first and fresh.by_method["eth_getBlockByNumber"] == before + 1
    chain.reorg(2)
    assert await probe(session, heads, fresh)  # the tag changed
    cache.on_head(heads.head)
    after, hit = await read()
    assert (
        not hit
        and orjson.loads(after)["hash"] == chain.block_hash(1_000) != (orjson.loads(first)["hash"])
    )
    assert heads.reorgs == 1


async def test_a_final_block_is_kept_across_reorgs_and_head_moves(
    session: aiohttp.ClientSession, nodes: list[ChainNode], chain: Chain
) -> None:
    fresh = nodes[0]
    heads = HeadTracker([fresh.url])  # the network's only node: its finality counts
    cache = ResponseCache(1 << 20, 1 << 16)
    await probe(session, heads, fresh)
    params: list[Any] = [hex(997), False]
    policy = classify("eth_getBlockByNumber", params, heads.head)
    assert policy.kind is Kind.IF_FINAL
    key = call_key("eth_getBlockByNumber", params)
    result = orjson.dumps(await rpc(session, fresh, "eth_getBlockByNumber", *params))
    assert cache.put(key, policy, heads.head, result, node_head=heads.node_head(fresh.url))
    chain.advance(3)
    chain.reorg(2)
    await probe(session, heads, fresh)
    cache.on_head(heads.head)
    later = classify("eth_getBlockByNumber", params, heads.head)
    assert cache.get("eth_getBlockByNumber", key, later, heads.head) == result


async def test_a_lagging_nodes_answer_is_not_cached(
    session: aiohttp.ClientSession, nodes: list[ChainNode]
) -> None:
    fresh, lagging = nodes
    heads = HeadTracker([n.url for n in nodes])
    for node in nodes:
        await probe(session, heads, node)
    # routing: the lagging node lacks block 999, so it never gets a call naming it (nor
    # does the fresh one while both are current: one node leads the agreed block by
    # at most head.solo_lead)
    assert lagging.url not in heads.nodes_with(999)
    cache = ResponseCache(1 << 20, 1 << 16)
    params: list[Any] = [{"fromBlock": hex(990), "toBlock": hex(997)}]
    policy = classify("eth_getLogs", params, heads.head)
    key = call_key("eth_getLogs", params)
    partial = orjson.dumps(await rpc(session, lagging, "eth_getLogs", *params))
    assert len(orjson.loads(partial)) == 6  # the lagging node clamps to its head 995
    assert not cache.put(key, policy, heads.head, partial, node_head=heads.node_head(lagging.url))
    # the range ends above the agreed head (995, with the lagging node current): not even
    # the fresh node's full answer is kept until the head the nodes agree on passes it
    full = orjson.dumps(await rpc(session, fresh, "eth_getLogs", *params))
    assert heads.head.number < 997
    assert not cache.put(key, policy, heads.head, full, node_head=heads.node_head(fresh.url))


async def test_identical_concurrent_reads_reach_the_node_once(
    session: aiohttp.ClientSession, nodes: list[ChainNode]
) -> None:
    fresh = nodes[0]
    co: Coalescer[bytes] = Coalescer()
    body = call("eth_getBlockByNumber", [hex(990), True])
    results = await asyncio.gather(
        *(co.run(("bsc", body), lambda: post(session, fresh, body)) for _ in range(20))
    )
    assert len(set(results)) == 1 and fresh.by_method["eth_getBlockByNumber"] == 1
    assert co.coalesced == 19


async def test_a_hanging_node_costs_the_hedge_delay_not_the_timeout(
    session: aiohttp.ClientSession, chain: Chain
) -> None:
    hanging, healthy = await start_chain_node(chain), await start_chain_node(chain)
    try:
        hanging.hang = True
        order = [hanging, healthy]
        latency = LatencyTracker([n.url for n in order], floor_s=0.05, ceiling_s=0.2)
        stats = HedgeStats()
        body = call("eth_chainId", [])

        def factory(n: int) -> Launch[bytes] | None:
            if n >= len(order):
                return None
            node = order[n]
            attempt = timed(latency, node.url, post(session, node, body), time.monotonic)
            return Launch(attempt, latency.delay(node.url))

        started = time.monotonic()
        reply = await run_hedged(factory, Budget(0.2), max_attempts=3, stats=stats)
        elapsed = time.monotonic() - started
        assert orjson.loads(reply)["result"] == "0x38"
        assert elapsed < 1.0 and stats.hedges == 1 and stats.hedges_won == 1
        assert hanging.by_method["eth_chainId"] == 1 and healthy.by_method["eth_chainId"] == 1
        assert latency.p95(hanging.url) is not None  # the cancelled loser was timed
        await asyncio.sleep(0)
        assert hanging.open_connections <= 1
    finally:
        await hanging.close()
        await healthy.close()
