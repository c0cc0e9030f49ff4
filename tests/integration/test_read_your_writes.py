"""Read your writes: no answer names a block above the eth_blockNumber served right after.

A dapp's approve-then-swap (ethers v6, two transactions back to back, each
waited for) through the gateway, in front of Hardhat and in front of the
demo's mock node (which makes a block on its own clock, as BSC does, and
whose newHeads stall here, as a node's subscription sometimes does):
after each receipt, ``eth_blockNumber`` is asked at once and must not be
below the receipt's block, and the second transaction of every pair goes
through with the nonce after the first's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest

from gateway import typedefs as T
from gateway.demo.mockws import Chain, start_ws_node
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.hardhat import JS, hardhat  # noqa: F401 (the fixture)
from tests.helpers.served import served
from tests.helpers.waiting import eventually

pytestmark = pytest.mark.slow

# Hardhat's first default account (funded on every hardhat node; no value anywhere).
HARDHAT_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
DEMO_KEY = "0x" + "0d" * 32


def _node_ready() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "ethers").is_dir()


async def _approve_swap(url: str, key: str, pairs: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "approve_swap.mjs"),
        url,
        key,
        str(pairs),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return seen


@pytest.mark.skipif(not _node_ready(), reason="npm ci --prefix tests/js has not run")
async def test_approve_then_swap_through_the_gateway_in_front_of_hardhat(
    make_config: MakeConfig,
    hardhat: str,  # noqa: F811 (the fixture imported above)
    store: Store,
    account: str,
) -> None:
    key, _ = await store.create_key(account, name="dapp")
    cfg = make_config(
        {"plans": {"free": {"rate": 10_000, "burst": 10_000}}}, upstreams={"bsc": [hardhat]}
    )
    async with served(cfg) as srv:
        seen = await _approve_swap(f"{srv.url}/bsc/{key}", HARDHAT_KEY, 5)
    assert seen["pairs"] == 5 and seen["receipts"] == 10
    assert seen["behind"] == [], seen


@pytest.mark.skipif(not _node_ready(), reason="npm ci --prefix tests/js has not run")
async def test_approve_then_swap_through_the_gateway_in_front_of_the_demo_node(
    make_config: MakeConfig, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, name="dapp")
    chains = [Chain(56, block_time_s=1.0), Chain(204, start_block=50_000_000)]
    nodes = [await start_ws_node(chain) for chain in chains]
    chains[0].start()
    cfg = make_config(
        {
            "plans": {"free": {"rate": 10_000, "burst": 10_000}},
            "upstream": {"probe_interval_s": 3.0},
        },
        upstreams={"bsc": [nodes[0].url], "opbnb": [nodes[1].url]},
    )
    try:
        async with served(cfg) as srv:
            await eventually(lambda: nodes[0].subscriptions("newHeads") == 1, 5.0)
            heads = srv.app[T.POOLS]["bsc"].intel.heads
            chains[0].mine()
            await eventually(lambda: heads.head.number == chains[0].head, 5.0)
            # Its newHeads stall (the socket stays open): the head must still follow
            # what the node's own answers show, not trail the receipts it serves.
            nodes[0].muted = True
            seen = await _approve_swap(f"{srv.url}/bsc/{key}", DEMO_KEY, 10)
    finally:
        for chain, node in zip(chains, nodes, strict=True):
            await chain.stop()
            await node.close()
    assert seen["pairs"] == 10 and seen["receipts"] == 20 and seen["nonce"] == 20
    assert seen["behind"] == [], seen
