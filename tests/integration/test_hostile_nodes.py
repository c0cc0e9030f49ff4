"""No node moves the chain alone: hostile and lagging nodes against the real app.

Each test runs the gateway (the real app, the test Redis) in front of honest
mock nodes plus one that lies: far-future ``newHeads``, headers whose hashes
its own HTTP answers do not have, a finalized mark above its own head, a
lagging node's ``null``, and the node that carried the head leaving. The
nodes are ``gateway.demo.mockws`` (HTTP + WebSocket, mining on a timer) or
``gateway.demo.chainnode`` (HTTP, a chain the test drives).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import typedefs as T
from gateway.demo import chainnode
from gateway.demo.mockws import Chain, MockWsNode, start_ws_node
from gateway.telemetry.metrics import METRICS
from tests.helpers.headnodes import HeadGateway, head_gateway, mock_chains  # noqa: F401
from tests.helpers.scrape import by_node
from tests.helpers.waiting import eventually


@pytest.fixture
async def driven() -> AsyncIterator[tuple[chainnode.Chain, list[chainnode.ChainNode]]]:
    """A chain the test drives, and the nodes it starts on it (closed afterwards)."""
    chain = chainnode.Chain(56, start=1_000)
    nodes: list[chainnode.ChainNode] = []
    yield chain, nodes
    for node in nodes:
        await node.close()


def _fake_hash(number: int) -> str:
    return "0x" + hashlib.sha256(b"phantom:%d" % number).hexdigest()


async def _ws_nodes(chains: dict[str, Chain], n: int) -> tuple[list[MockWsNode], MockWsNode]:
    bsc = [await start_ws_node(chains["bsc"]) for _ in range(n)]
    return bsc, await start_ws_node(chains["opbnb"])


async def test_a_far_future_header_moves_nothing_and_costs_no_honest_answer(
    gw: HeadGateway,
    chains: dict[str, Chain],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One node's newHeads run 1,000,000 blocks ahead while its HTTP is honest: no
    header counts until its own HTTP answer has the block, so eth_blockNumber and
    logs filters never see it, and a lead alone proves no lie (it stays in)."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    chain = chains["bsc"]
    chain.block_time_s = 0.2
    bsc, opbnb = await _ws_nodes(chains, 3)
    liar = bsc[2]
    forged: list[float] = []

    def far_future(header: dict[str, Any]) -> dict[str, Any]:
        forged.append(time.time())
        return {**header, "number": hex(int(header["number"], 16) + 1_000_000)}

    liar.forge = far_future
    client = await gw.start(
        {"upstream": {"probe_interval_s": 0.5}},
        {"bsc": [n.url for n in bsc], "opbnb": [opbnb.url]},
    )
    await eventually(lambda: all(n.subscriptions("newHeads") == 1 for n in bsc), 5.0)
    pool = client.app[T.POOLS]["bsc"]
    fid = await gw.result("eth_newFilter", [{}])
    chain.start()
    await eventually(lambda: chain.head >= 40_000_003 and len(forged) >= 3, 5.0)
    for _ in range(10):
        number = int(await gw.result("eth_blockNumber", []), 16)
        assert number <= chain.head, (number, chain.head)
    assert pool.intel.heads.head.number <= chain.head
    logs = await gw.result("eth_getFilterChanges", [fid])
    assert logs, "a logs filter made while the liar spoke must still see the chain's logs"
    await eventually(
        lambda: pool.intel.heads.head.number >= chain.head - 1, 5.0, "the head follows the chain"
    )
    assert not pool.nodes[2].inconsistent and pool.nodes[2].in_service()
    assert not any("upstream inconsistent" in r.getMessage() for r in caplog.records)
    flags = await by_node(client.app[METRICS], "gateway_upstream_inconsistent")
    assert flags.get("bsc-2", 0.0) == 0.0


async def test_headers_with_hashes_the_nodes_answers_lack_never_reach_a_filter(
    gw: HeadGateway,
    chains: dict[str, Chain],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node whose newHeads hashes its own HTTP answers contradict: block filters only
    ever return real hashes, and the node leaves rotation after a few headers."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    chain = chains["bsc"]
    chain.block_time_s = 0.15
    bsc, opbnb = await _ws_nodes(chains, 2)
    forged_at: list[float] = []

    def phantom(header: dict[str, Any]) -> dict[str, Any]:
        forged_at.append(time.time())
        return {**header, "hash": _fake_hash(int(header["number"], 16))}

    bsc[1].forge = phantom
    client = await gw.start(
        {"upstream": {"probe_interval_s": 3.0}},
        {"bsc": [n.url for n in bsc], "opbnb": [opbnb.url]},
    )
    await eventually(lambda: all(n.subscriptions("newHeads") == 1 for n in bsc), 5.0)
    fid = await gw.result("eth_newBlockFilter", [])
    chain.start()
    seen: list[str] = []
    for _ in range(10):
        await eventually(lambda: True, 0.3)  # let a block or two come
        start = chain.head
        seen += await gw.result("eth_getFilterChanges", [fid])
        await eventually(lambda s=start: chain.head > s, 5.0)
    real = {chain.block_hash(n) for n in range(40_000_000, chain.head + 1)}
    assert seen and set(seen) <= real, [h for h in seen if h not in real]
    pool = client.app[T.POOLS]["bsc"]
    assert "contradict" in pool.nodes[1].inconsistent
    line = next(r for r in caplog.records if "upstream inconsistent" in r.getMessage())
    took = line.created - forged_at[0]
    print(f"wrong-hash node left rotation {took:.2f} s after its first forged header")


async def test_a_finalized_mark_above_the_nodes_own_head_caches_nothing_as_final(
    gw: HeadGateway,
    driven: tuple[chainnode.Chain, list[chainnode.ChainNode]],
) -> None:
    """A node says its head block is finalized (and more): the head block is not kept as
    final, so after the honest nodes re-organise it every read has the new block."""
    chain, nodes = driven
    nodes += [await chainnode.start_chain_node(chain) for _ in range(2)]
    nodes[1].finality_lie = 5  # finalized = head + 3: above its own head
    client = await gw.start(
        {"upstream": {"probe_interval_s": 0.05}},
        {"bsc": [n.url for n in nodes]},
    )
    pool = client.app[T.POOLS]["bsc"]
    await eventually(lambda: pool.intel.heads.head.number == 1_000, 5.0)
    first = await gw.result("eth_getBlockByNumber", [hex(1_000), False])
    assert first["hash"] == chain.block_hash(1_000)
    assert pool.intel.heads.head.finalized <= 998  # the honest node's mark
    chain.reorg(1)
    new = chain.block_hash(1_000)
    await eventually(lambda: pool.intel.heads.head.hash == new, 5.0, "the re-org seen")
    hashes = [
        (await gw.result("eth_getBlockByNumber", [hex(1_000), False]))["hash"] for _ in range(10)
    ]
    assert hashes == [new] * 10


async def test_a_lagging_nodes_null_is_asked_again_of_a_node_at_the_head(
    gw: HeadGateway,
    driven: tuple[chainnode.Chain, list[chainnode.ChainNode]],
) -> None:
    """Receipts of the block before the head, through a fresh node and one two blocks
    behind (the cache off, so every call reaches a node): none comes back null; a
    receipt nobody has still answers null."""
    chain, nodes = driven
    nodes += [
        await chainnode.start_chain_node(chain),
        await chainnode.start_chain_node(chain, lag=2),
    ]
    client = await gw.start(
        {"upstream": {"probe_interval_s": 0.05}, "cache": {"enabled": False}},
        {"bsc": [n.url for n in nodes]},
    )
    pool = client.app[T.POOLS]["bsc"]
    await eventually(lambda: pool.intel.heads.node_head("bsc-1") == 998, 5.0)
    tx = chain.tx_hash(999)
    receipts = [await gw.result("eth_getTransactionReceipt", [tx]) for _ in range(30)]
    assert all(r is not None for r in receipts), sum(r is None for r in receipts)
    assert nodes[1].by_method["eth_getTransactionReceipt"] > 0  # the lagging node was asked
    unknown = "0x" + "00" * 32
    assert await gw.result("eth_getTransactionReceipt", [unknown]) is None


async def test_when_the_head_node_leaves_nothing_it_said_stays_in_force(
    gw: HeadGateway,
    driven: tuple[chainnode.Chain, list[chainnode.ChainNode]],
) -> None:
    """The node at the head goes down: the head, routing and the cache follow the node
    left (its latest block), while eth_blockNumber answers never go back."""
    chain, nodes = driven
    nodes += [
        await chainnode.start_chain_node(chain),
        await chainnode.start_chain_node(chain, lag=5),
    ]
    client = await gw.start(
        {"upstream": {"probe_interval_s": 0.05}},
        {"bsc": [n.url for n in nodes]},
    )
    pool = client.app[T.POOLS]["bsc"]
    await eventually(lambda: pool.intel.heads.node_head("bsc-1") == 995, 5.0)
    assert int(await gw.result("eth_blockNumber", []), 16) == 1_000
    for _ in range(4):  # the lagging node answers its own latest (not kept): ask again
        latest = await gw.result("eth_getBlockByNumber", ["latest", False])
        if latest["number"] == hex(1_000):
            break
    assert latest["number"] == hex(1_000)  # now cached at the head
    nodes[0].down = True
    await eventually(lambda: not pool.nodes[0].in_service(), 5.0)
    assert pool.intel.heads.head.number == 995
    latest = await gw.result("eth_getBlockByNumber", ["latest", False])
    assert latest["number"] == hex(995), "a block only the departed node vouched for"
    assert int(await gw.result("eth_blockNumber", []), 16) == 1_000


async def test_a_final_block_asked_by_hash_ten_times_reaches_the_node_once(
    gw: HeadGateway,
    driven: tuple[chainnode.Chain, list[chainnode.ChainNode]],
) -> None:
    """The block turns final while its first answer is on the way: it is kept as final
    (not under the head it was asked at, which is gone by then) and never asked again."""
    chain, nodes = driven
    node = await chainnode.start_chain_node(chain)
    nodes.append(node)
    node.options = dataclasses.replace(node.options, spare_probes=True)  # probes not held
    client = await gw.start(
        {"upstream": {"probe_interval_s": 0.05}},
        {"bsc": [node.url]},
    )
    pool = client.app[T.POOLS]["bsc"]
    await eventually(lambda: pool.intel.heads.head.finalized == 998, 5.0)
    digest = chain.block_hash(999)  # not final yet
    node.hold_s = 0.5
    first = asyncio.create_task(gw.result("eth_getBlockByHash", [digest, False]))
    await eventually(lambda: node.by_method["eth_getBlockByHash"] == 1, 5.0)
    chain.advance()  # block 999 is final now
    await eventually(lambda: pool.intel.heads.head.finalized == 999, 5.0)
    assert (await first)["hash"] == digest
    node.hold_s = None
    for _ in range(9):
        target = chain.advance()
        await eventually(lambda t=target: pool.intel.heads.head.number == t, 5.0)
        block = await gw.result("eth_getBlockByHash", [digest, False])
        assert block["hash"] == digest
    assert node.by_method["eth_getBlockByHash"] == 1
