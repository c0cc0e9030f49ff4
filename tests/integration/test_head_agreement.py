"""The head the nodes agree on, against real sockets at the shipped defaults: a node
far behind takes no part and costs the healthy one nothing; a consistent private
fork never sets the head beyond one node's solo lead."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from gateway import typedefs as T
from gateway.demo.mockws import Chain, start_ws_node
from gateway.telemetry.metrics import METRICS
from tests.helpers.headnodes import (  # noqa: F401
    HeadGateway,
    WallChain,
    head_gateway,
    mock_chains,
)
from tests.helpers.readyz import readyz_details
from tests.helpers.scrape import scrape
from tests.helpers.waiting import eventually

SPACING_S = 0.2  # the honest chains mine (and are stamped) this often
START = 40_000_000


async def _mine(chains: list[Chain], rounds: int) -> None:
    for _ in range(rounds):
        await asyncio.sleep(SPACING_S)
        for chain in chains:
            chain.mine()


async def test_a_node_70_blocks_behind_takes_no_part_and_the_healthy_one_serves(
    gw: HeadGateway,
) -> None:
    """Two nodes, one serving the same chain 70 blocks late (nothing false): the
    healthy node stays in rotation and every latest answer is its head."""
    t0 = time.time()
    healthy = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    late = WallChain(56, start_block=START - 70, t0=t0, spacing_s=SPACING_S, n0=START)
    top, behind = await start_ws_node(healthy), await start_ws_node(late)
    try:
        client = await gw.start({}, {"bsc": [top.url, behind.url]})
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        miner = asyncio.create_task(_mine([healthy, late], 25))
        seen = 0
        while not miner.done():
            number = int(await gw.result("eth_blockNumber", []), 16)
            block = await gw.result("eth_getBlockByNumber", ["latest", False])
            assert number >= healthy.head - 2, (number, healthy.head)
            assert int(block["number"], 16) >= healthy.head - 2
            assert not pool.nodes[0].inconsistent and pool.nodes[0].in_service()
            seen += 1
            await asyncio.sleep(0.05)
        await miner
        assert seen >= 10
        assert pool.nodes[1].in_service() and not pool.intel.heads.current("bsc-1")
    finally:
        for node in (top, behind):
            await node.close()


@pytest.mark.parametrize("honest_nodes", [1, 2])
async def test_a_consistent_private_fork_never_sets_the_head(
    gw: HeadGateway, honest_nodes: int
) -> None:
    """One node on its own fork, 58 blocks ahead and creeping on, its headers,
    probes and by-number answers all agreeing: with 2 and 3 nodes, eth_blockNumber
    never passes the honest head by more than head.solo_lead (1) and every latest
    block served is the honest chain's."""
    t0 = time.time()
    honest = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    # Stamped as fresh as the honest chain, so no clock proves it wrong.
    fork = WallChain(56, start_block=START, t0=t0, spacing_s=0.001, fork_from=START)
    nodes = [await start_ws_node(honest) for _ in range(honest_nodes)]
    liar = await start_ws_node(fork)
    try:
        client = await gw.start({}, {"bsc": [*(n.url for n in nodes), liar.url]})
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        fork.mine(58)
        miner = asyncio.create_task(_mine([honest, fork], 20))
        served_by_liar = 0
        while not miner.done():
            number = int(await gw.result("eth_blockNumber", []), 16)
            assert number <= honest.head + 1, (number, honest.head, fork.head)
            block = await gw.result("eth_getBlockByNumber", ["latest", False])
            assert block["hash"] == honest.block_hash(int(block["number"], 16)), block
            await gw.result("eth_getBalance", ["0x" + "11" * 20, "latest"])
            served_by_liar = sum(1 for c in liar.calls if c == "eth_getBalance")
            await asyncio.sleep(0.05)
        await miner
        assert served_by_liar == 0, "a latest state read reached the private fork"
        heads = pool.intel.heads
        if honest_nodes == 2:  # the two honest nodes agree: the head follows them
            assert heads.head.number >= honest.head - 2
        else:  # one honest word against one liar's: held, and said to be split
            assert heads.head.number <= START + 1 and heads.split
    finally:
        for node in (*nodes, liar):
            await node.close()


async def test_two_nodes_on_two_forks_hold_the_head_and_say_split(
    gw: HeadGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """Two current nodes, each on a fork of its own above block START: the head
    stays at START (eth_blockNumber takes no side beyond one node's solo lead), one log
    line, gateway_network_split{network} and /readyz on the metrics listener
    say the network is split."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    t0 = time.time()
    honest = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    other = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S, fork_from=START)
    a, b = await start_ws_node(honest), await start_ws_node(other)
    try:
        client = await gw.start({}, {"bsc": [a.url, b.url]})
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        await _mine([honest, other], 5)
        await eventually(lambda: pool.intel.heads.split, 5.0, "the split seen")
        assert pool.intel.heads.head.number == START  # held at the agreed block
        # eth_blockNumber never goes back: it may still show the one block a node
        # led by (head.solo_lead) before the other node's fork was confirmed
        assert START <= int(await gw.result("eth_blockNumber", []), 16) <= START + 1
        block = await gw.result("eth_getBlockByNumber", [hex(START), False])
        assert block["hash"] == honest.block_hash(START)  # the agreed block, as agreed
        assert all(n.in_service() and not n.inconsistent for n in pool.nodes)
        lines = [r.getMessage() for r in caplog.records if "network split" in r.getMessage()]
        assert len(lines) == 1 and "network=bsc" in lines[0]
        assert f"agreed block {START}" in lines[0]
        _, body = await readyz_details(client.app)
        assert body["networks"]["bsc"]["split"] is True
        if pool.intel_metrics is not None:
            pool.intel_metrics.sync(pool.intel)  # the probe does it too; not waiting for one
        _, _, text = await scrape(client.app[METRICS])
        assert 'gateway_network_split{network="bsc"} 1.0' in text
    finally:
        for node in (a, b):
            await node.close()


async def test_a_lone_nodes_finalized_mark_at_its_head_survives_a_reorg(
    gw: HeadGateway, chains: dict[str, Chain]
) -> None:
    """One node that calls its head finalized: the gateway takes its mark only two
    blocks below its head, so after a 2-block re-org the replaced block is never
    served from the cache as final."""
    chain = chains["bsc"]
    node = await start_ws_node(chain)
    client = await gw.start({}, {"bsc": [node.url]})
    pool = client.app[T.POOLS]["bsc"]
    chain.mine(3)
    top = chain.head
    await eventually(lambda: pool.intel.heads.head.number == top, 5.0, "the head at the tip")
    await eventually(lambda: pool.intel.heads.head.finalized >= top - 2, 5.0, "a mark")
    assert pool.intel.heads.head.finalized == top - 2  # never the node's word at its head
    before = await gw.result("eth_getBlockByNumber", [hex(top), False])
    assert before["hash"] == chain.block_hash(top)
    chain.reorg(2)
    assert chain.block_hash(top) != before["hash"]

    async def replaced() -> bool:
        block = await gw.result("eth_getBlockByNumber", [hex(top), False])
        return bool(block["hash"] == chain.block_hash(top))

    await eventually(replaced, 5.0, "the re-organised block served")
    kept = await gw.result("eth_getBlockByNumber", [hex(top - 2), False])
    assert kept["hash"] == chain.block_hash(top - 2)  # below the mark: untouched
