"""Old state to nodes that keep it, heavy methods to their own nodes, against a real node.

Relays in front of one Hardhat node (chain 56) play a pruned full node
(geth's ``missing trie node`` below its last ``state_blocks``), an archive
node, and a trace node whose ``debug_traceTransaction`` is slow; each
counts what it saw, so the tests say what never reached a node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from gateway.config import Config
from tests.helpers import hardhat as hh
from tests.helpers.config import MakeConfig
from tests.helpers.evmstack import rpc
from tests.helpers.procs import stop
from tests.helpers.relay import NodeRelay
from tests.helpers.served import Served, served

pytestmark = pytest.mark.slow  # a Hardhat node of its own

RICH = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
OTHER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


@pytest.fixture(scope="module")
def chain_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = hh.missing()
    if reason is not None:
        pytest.skip(reason)
    url, proc = hh.start(tmp_path_factory.mktemp("hardhat") / "hardhat.log")

    async def build() -> None:
        # balances that differ by block: a transfer at block 1, then 300 empty blocks
        await rpc(url, "eth_sendTransaction", [{"from": RICH, "to": OTHER, "value": "0x1"}])
        await rpc(url, "hardhat_mine", [hex(300)])

    try:
        asyncio.run(build())
        yield url
    finally:
        stop(proc)


async def _post(url: str, method: str, params: list[Any]) -> tuple[dict[str, Any], Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return await resp.json(content_type=None), resp.headers


def _config(make_config: MakeConfig, nodes: list[Any], **network: Any) -> Config:
    return make_config(
        {
            "server": {"metrics_listen": ""},
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            "networks": {"bsc": {"upstreams": nodes, **network}},
        }
    )


async def _in_service(gw: Served, names: set[str]) -> None:
    from gateway.typedefs import POOLS

    pool = gw.app[POOLS]["bsc"]
    for _ in range(200):
        if {n.name for n in pool.nodes if n.in_service() and n.head > 0} >= names:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("nodes not in service")


async def test_old_state_goes_only_to_the_archive_node(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    async with NodeRelay(chain_node, state_blocks=128) as pruned, NodeRelay(chain_node) as archive:
        cfg = _config(
            make_config,
            [
                {"url": pruned.url, "name": "full"},
                {"url": archive.url, "name": "archive", "archive": True},
            ],
        )
        async with served(cfg) as gw:
            await _in_service(gw, {"full", "archive"})
            url = f"{gw.url}/bsc/{api_key}"
            direct = await rpc(chain_node, "eth_getBalance", [OTHER, "0x1"])
            for _ in range(6):  # round robin would give the pruned node half of them
                answer, _headers = await _post(url, "eth_getBalance", [OTHER, "0x1"])
                assert answer["result"] == direct
            assert pruned.calls("eth_getBalance") == []
            assert len(archive.calls("eth_getBalance")) >= 1  # the rest from the cache
            # recent state: either node (other addresses: no answer from the cache)
            for n in range(4):
                who = "0x" + f"{n + 1:040x}"
                answer, _h = await _post(url, "eth_getTransactionCount", [who, "latest"])
                assert "result" in answer
            assert pruned.calls("eth_getTransactionCount")
            # A block by hash the gateway cannot place goes to the archive node too.
            block5 = await rpc(chain_node, "eth_getBlockByNumber", ["0x5", False])
            params = [RICH, {"blockHash": block5["hash"]}]
            answer, _h = await _post(url, "eth_getCode", params)
            assert answer["result"] == await rpc(chain_node, "eth_getCode", params)
            assert pruned.calls("eth_getCode") == []


async def test_no_archive_in_service_answers_missing_trie_node_unasked(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    async with NodeRelay(chain_node, state_blocks=128) as pruned:
        cfg = _config(make_config, [{"url": pruned.url, "name": "full", "state_blocks": 128}])
        async with served(cfg) as gw:
            await _in_service(gw, {"full"})
            url = f"{gw.url}/bsc/{api_key}"
            answer, _h = await _post(url, "eth_getBalance", [OTHER, "0x1"])
            assert answer["error"]["code"] == -32000
            assert answer["error"]["message"].startswith("missing trie node")
            assert answer["error"]["data"]["block"] == 1
            assert pruned.calls("eth_getBalance") == []
            # a batch: the old read refused, the recent one answered by the node
            body = [
                {"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": [{"to": OTHER}, "0x2"]},
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "eth_getBalance",
                    "params": [OTHER, "latest"],
                },
            ]
            async with aiohttp.ClientSession() as s, s.post(url, json=body) as resp:
                answers = {a["id"]: a for a in await resp.json()}
            assert answers[1]["error"]["message"].startswith("missing trie node")
            assert answers[2]["result"] == await rpc(
                chain_node, "eth_getBalance", [OTHER, "latest"]
            )
            assert pruned.calls("eth_call") == []


async def test_a_trace_reaches_only_its_group_under_its_own_timeout(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    """A 1.2 s trace with timeout_s = 3 succeeds while every other call has 1 s."""
    tx = (await rpc(chain_node, "eth_getBlockByNumber", ["0x1", False]))["transactions"][0]
    async with (
        NodeRelay(chain_node) as plain,
        NodeRelay(chain_node, delay={"debug_traceTransaction": 1.2}) as tracer,
    ):
        nodes = [
            {"url": plain.url, "name": "rpc"},
            {"url": tracer.url, "name": "tracer", "groups": ["trace"]},
        ]
        routes = {"debug_trace*": {"weight": 14, "group": "trace", "timeout_s": 3}}
        cfg = make_config(
            {
                "server": {"metrics_listen": ""},
                "limits": {"upstream_timeout_s": 1.0},
                "upstream": {"attempt_timeout_s": 1.0},
                "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
                "networks": {"bsc": {"upstreams": nodes, "extra_methods": routes}},
            }
        )
        async with served(cfg) as gw:
            await _in_service(gw, {"rpc", "tracer"})
            url = f"{gw.url}/bsc/{api_key}"
            for _ in range(3):
                answer, _h = await _post(url, "debug_traceTransaction", [tx])
                assert "result" in answer, answer
            assert plain.calls("debug_traceTransaction") == []
            assert len(tracer.calls("debug_traceTransaction")) == 3
        # Without its own timeout the same trace runs out of the 1 s default.
        routes = {"debug_trace*": {"weight": 14, "group": "trace"}}
        cfg = make_config(
            {
                "server": {"metrics_listen": ""},
                "limits": {"upstream_timeout_s": 1.0},
                "upstream": {"attempt_timeout_s": 1.0},
                "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
                "networks": {"bsc": {"upstreams": nodes, "extra_methods": routes}},
            }
        )
        async with served(cfg) as gw:
            await _in_service(gw, {"rpc", "tracer"})
            answer, _h = await _post(f"{gw.url}/bsc/{api_key}", "debug_traceTransaction", [tx])
            assert answer["error"]["code"] == -32603
            assert plain.calls("debug_traceTransaction") == []


async def test_bscs_own_reads_reach_the_node(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    """Forwarded, not refused by the gateway: the node's own answer comes back."""
    async with NodeRelay(chain_node) as node:
        cfg = _config(make_config, [{"url": node.url, "name": "bsc-node"}])
        async with served(cfg) as gw:
            await _in_service(gw, {"bsc-node"})
            url = f"{gw.url}/bsc/{api_key}"
            tx = "0x" + "ab" * 32
            for method, params in (
                ("eth_getBlobSidecars", ["latest"]),
                ("eth_getBlobSidecarByTxHash", [tx]),
                ("eth_getTransactionsByBlockNumber", ["0x1"]),
                ("eth_getTransactionDataAndReceipt", [tx]),
            ):
                answer, _h = await _post(url, method, params)
                direct = await _post(chain_node, method, params)
                assert answer.get("error") == direct[0].get("error"), method
                assert node.calls(method) == [params]


async def test_a_cached_old_state_answer_is_served_with_no_archive_in_service(
    make_config: MakeConfig, api_key: str, chain_node: str
) -> None:
    """Only a cache miss is refused for old state: a final block's cached answer stays right."""
    from gateway.typedefs import POOLS

    async with NodeRelay(chain_node, state_blocks=128) as pruned:
        archive = await NodeRelay(chain_node).__aenter__()
        stopped = False
        try:
            nodes = [
                {"url": pruned.url, "name": "full", "state_blocks": 128},
                {"url": archive.url, "name": "archive", "archive": True},
            ]
            cfg = make_config(
                {
                    "server": {"metrics_listen": ""},
                    "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
                    "upstream": {"probe_interval_s": 0.2},
                    "networks": {"bsc": {"upstreams": nodes}},
                }
            )
            async with served(cfg) as gw:
                await _in_service(gw, {"full", "archive"})
                url = f"{gw.url}/bsc/{api_key}"
                direct = await rpc(chain_node, "eth_getBalance", [OTHER, "0x1"])
                answer, headers = await _post(url, "eth_getBalance", [OTHER, "0x1"])
                assert answer["result"] == direct and headers["X-Gateway-Node"] == "archive"
                await archive.__aexit__(None, None, None)  # the only archive node goes away
                stopped = True
                pool = gw.app[POOLS]["bsc"]
                deadline = asyncio.get_running_loop().time() + 20
                while any(n.in_service() for n in pool.nodes if n.name == "archive"):
                    assert asyncio.get_running_loop().time() < deadline, "archive still in service"
                    await asyncio.sleep(0.05)
                answer, headers = await _post(url, "eth_getBalance", [OTHER, "0x1"])
                assert answer["result"] == direct
                assert headers["X-Gateway-Cache"] == "hit"
                # a block the cache does not hold is refused unasked, as before
                answer, _h = await _post(url, "eth_getBalance", [OTHER, "0x2"])
                assert answer["error"]["message"].startswith("missing trie node")
                assert pruned.calls("eth_getBalance") == []
        finally:
            if not stopped:
                await archive.__aexit__(None, None, None)
