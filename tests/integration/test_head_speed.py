"""No speed takes an honest node out: a real node mining a burst stays in service.

One Hardhat node (chain 56) in front of a gateway at its shipped defaults
(BSC's 0.45 s block time): ``hardhat_mine`` of 50 blocks at once, then a
transaction per block (automine). Every call through the gateway must be
answered and the node must never leave rotation, because a node catching up
runs far faster than the block time and is right. And two Hardhat nodes, one
of which mined a burst and so stamps every later block seconds ahead of the
clock and of the other node: still no lie.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.helpers import hardhat as hh
from tests.helpers.config import MakeConfig
from tests.helpers.evmstack import hardhat_node, rpc
from tests.helpers.procs import stop
from tests.helpers.served import served

pytestmark = pytest.mark.slow  # a Hardhat node of its own

RICH = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
OTHER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


@pytest.fixture(scope="module")
def chain_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = hh.missing()
    if reason is not None:
        pytest.skip(reason)
    url, proc = hh.start(tmp_path_factory.mktemp("hardhat") / "hardhat.log")
    try:
        yield url
    finally:
        stop(proc)


async def _post(session: aiohttp.ClientSession, url: str, method: str, params: list[Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_a_burst_of_blocks_and_automine_never_take_the_node_out(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    from gateway.typedefs import POOLS

    cfg = make_config(
        {
            "server": {"metrics_listen": ""},
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            # only the node list moves; block_time_s stays at BSC's 0.45 s
            "networks": {"bsc": {"upstreams": [{"url": chain_node, "name": "hh"}]}},
        }
    )
    async with served(cfg) as gw, aiohttp.ClientSession() as session:
        node = gw.app[POOLS]["bsc"].nodes[0]
        url = f"{gw.url}/bsc/{api_key}"
        for _ in range(200):
            if node.in_service() and node.head > 0:
                break
            await asyncio.sleep(0.05)
        out_seen: list[str] = []
        failures: list[Any] = []
        stop_watch = asyncio.Event()

        async def watch() -> None:
            while not stop_watch.is_set():
                if not node.in_service():
                    out_seen.append("out")
                status, answer = await _post(session, url, "eth_getBalance", [OTHER, "latest"])
                if status != 200 or "error" in answer:
                    failures.append((status, answer))
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        await rpc(chain_node, "hardhat_mine", [hex(50)])
        await asyncio.sleep(1.0)
        for _ in range(20):  # automine: a block per transaction, as fast as they come
            await rpc(
                chain_node, "eth_sendTransaction", [{"from": RICH, "to": OTHER, "value": "0x1"}]
            )
            await asyncio.sleep(0.05)
        top = int(str(await rpc(chain_node, "eth_blockNumber", [])), 16)
        seen = -1
        for _ in range(100):
            _s, answer = await _post(session, url, "eth_blockNumber", [])
            seen = int(answer.get("result", "-0x1"), 16)
            if seen >= top:
                break
            await asyncio.sleep(0.05)
        stop_watch.set()
        await watcher
        assert not out_seen, "the node left rotation while mining fast"
        assert not failures, failures[:3]
        assert seen >= top, (seen, top)


async def test_a_dev_node_that_keeps_its_burst_lead_stays_in_rotation(
    make_config: MakeConfig, api_key: str
) -> None:
    """Hardhat stamps a burst a second a block ahead of the clock and then keeps that
    lead: a block mined seconds later is stamped as far ahead. Beside a node that
    mined nothing, that node is ahead of the clock and of the other node by more
    than ``head.clock_skew_s``, yet no block of it jumps ahead: it stays in."""
    from gateway.typedefs import POOLS

    if (reason := hh.missing()) is not None:
        pytest.skip(reason)
    async with hardhat_node(56) as calm, hardhat_node(56) as busy:
        cfg = make_config(
            {
                "server": {"metrics_listen": ""},
                "networks": {
                    "bsc": {
                        "upstreams": [{"url": calm, "name": "calm"}, {"url": busy, "name": "busy"}]
                    }
                },
            }
        )
        async with served(cfg) as gw:
            nodes = gw.app[POOLS]["bsc"].nodes
            for _ in range(200):
                if all(n.in_service() for n in nodes):
                    break
                await asyncio.sleep(0.05)
            for _ in range(6):  # the burst: six blocks at once, each a second later
                await rpc(busy, "evm_mine", [])
            leads: list[float] = []
            for _ in range(3):  # then a block every 4 s, the lead kept
                await asyncio.sleep(4.0)
                await rpc(busy, "evm_mine", [])
                block = await rpc(busy, "eth_getBlockByNumber", ["latest", False])
                leads.append(int(block["timestamp"], 16) - time.time())
                await asyncio.sleep(0.5)  # the gateway sees it (probe or newHeads)
                assert all(n.in_service() for n in nodes), [n.inconsistent for n in nodes]
            head = gw.app[POOLS]["bsc"].intel.heads.node_head("busy")
    assert min(leads) > cfg.head.clock_skew_s, leads  # ahead of the clock all along
    assert head is not None and head >= 9  # all nine blocks confirmed
