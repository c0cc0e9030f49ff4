"""A node that stalls and catches up, a liar that comes back, a liar that creeps:
against real sockets at the shipped defaults (BSC's 0.45 s block time, so
``head.stale_s`` is 4.5 s).

A node catching up runs far faster than the block time and is right: it must
never leave rotation for it. A node on a private fork must never set the head
past one node's solo lead, however it gets ahead: all at once on re-entering
service, or a block at a time.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway import typedefs as T
from gateway.demo.mockws import start_ws_node
from tests.helpers.headnodes import (  # noqa: F401
    HeadGateway,
    WallChain,
    head_gateway,
    mock_chains,
)
from tests.helpers.waiting import eventually

pytestmark = pytest.mark.slow  # seconds of mined blocks each

SPACING_S = 0.2  # the honest chains mine (and are stamped) this often
START = 40_000_000


async def test_a_node_stalling_ten_seconds_then_catching_up_stays_in_rotation(
    gw: HeadGateway,
) -> None:
    """Two nodes of one chain; one stops following for 10 s (50 blocks), then
    catches up at once. While stalled it is behind (no latest call reaches
    it) and the other serves every call; it never leaves rotation, and once
    caught up it is current again and takes its part in the head."""
    t0 = time.time()
    lead = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    slow = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    a, b = await start_ws_node(lead), await start_ws_node(slow)
    try:
        client = await gw.start({}, {"bsc": [a.url, b.url]})
        pool = client.app[T.POOLS]["bsc"]
        heads = pool.intel.heads
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        stalled_at = time.monotonic()
        failures: list[object] = []
        while time.monotonic() - stalled_at < 10.0:  # only the lead mines
            await asyncio.sleep(SPACING_S)
            lead.mine()
            status, answer = await gw.call("eth_getBlockByNumber", ["latest", False])
            if status != 200 or "result" not in answer:
                failures.append((status, answer))
            assert pool.nodes[1].in_service() and not pool.nodes[1].inconsistent
        assert not failures, failures[:3]
        assert not heads.current("bsc-1"), "a node 50 blocks stale still counted as current"
        calls_before = b.calls.count("eth_getBalance")
        await gw.result("eth_getBalance", ["0x" + "11" * 20, "latest"])
        assert b.calls.count("eth_getBalance") == calls_before  # behind: no latest call
        slow.mine(lead.head - slow.head)  # the catch-up: 50 blocks in one burst
        await eventually(lambda: heads.current("bsc-1"), 5.0, "current again after catching up")
        for _ in range(5):
            await asyncio.sleep(SPACING_S)
            lead.mine()
            slow.mine()
        assert all(n.in_service() and not n.inconsistent for n in pool.nodes)
        assert int(await gw.result("eth_blockNumber", []), 16) >= lead.head - 2
    finally:
        for node in (a, b):
            await node.close()


async def test_a_liar_re_entering_service_already_ahead_never_sets_the_head(
    gw: HeadGateway,
) -> None:
    """Two honest nodes and one on a private fork. The liar goes down, its fork
    runs 58 blocks ahead meanwhile, and it comes back ahead on its very first
    probe: eth_blockNumber never passes the honest head by more than
    head.solo_lead, and every latest block served is the honest chain's."""
    t0 = time.time()
    honest = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    fork = WallChain(56, start_block=START, t0=t0, spacing_s=0.001, fork_from=START)
    nodes = [await start_ws_node(honest) for _ in range(2)]
    liar = await start_ws_node(fork)
    try:
        client = await gw.start({}, {"bsc": [*(n.url for n in nodes), liar.url]})
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        liar.down = True
        await liar.drop()
        await eventually(lambda: not pool.nodes[2].in_service(), 30.0, "the liar out of service")
        fork.mine(58)
        liar.down = False
        await eventually(lambda: pool.nodes[2].in_service(), 30.0, "the liar back in service")
        for _ in range(15):
            await asyncio.sleep(SPACING_S)
            honest.mine()
            fork.mine()
            number = int(await gw.result("eth_blockNumber", []), 16)
            assert number <= honest.head + 1, (number, honest.head, fork.head)
            block = await gw.result("eth_getBlockByNumber", ["latest", False])
            assert block["hash"] == honest.block_hash(int(block["number"], 16)), block
        assert pool.intel.heads.head.number >= honest.head - 2  # the honest pair leads
    finally:
        for node in (*nodes, liar):
            await node.close()


async def test_a_liar_creeping_ahead_a_block_at_a_time_never_leads(gw: HeadGateway) -> None:
    """A private fork that gains one block on the honest chain every block (never
    a jump a rule could see): with two honest nodes beside it, after 40 blocks
    it is 40 ahead, and the head is still the honest one, no latest state read
    reaching the liar."""
    t0 = time.time()
    honest = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S)
    fork = WallChain(56, start_block=START, t0=t0, spacing_s=SPACING_S / 2, fork_from=START)
    nodes = [await start_ws_node(honest) for _ in range(2)]
    liar = await start_ws_node(fork)
    try:
        client = await gw.start({}, {"bsc": [*(n.url for n in nodes), liar.url]})
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: all(n.in_service() for n in pool.nodes), 5.0)
        for _ in range(40):
            await asyncio.sleep(SPACING_S)
            honest.mine()
            fork.mine(2)
            number = int(await gw.result("eth_blockNumber", []), 16)
            assert number <= honest.head + 1, (number, honest.head, fork.head)
            await gw.result("eth_getBalance", ["0x" + "22" * 20, "latest"])
        assert fork.head - honest.head >= 40
        assert liar.calls.count("eth_getBalance") == 0, "a latest state read reached the liar"
        assert pool.intel.heads.head.number >= honest.head - 2
    finally:
        for node in (*nodes, liar):
            await node.close()
