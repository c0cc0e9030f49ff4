"""eth_getLogs over any range the plan allows, against a real node behind limited relays.

A Hardhat node (chain 56) holds a few thousand blocks with events; relays
in front of it play nodes that refuse wide ranges in geth's words ("exceed
maximum block range: N") and in the "query returned more than 10000
results" words, or declare their limit in the node table. Through the
gateway the answer must equal the node's own answer without a limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from gateway.config import Config
from tests.helpers import hardhat as hh
from tests.helpers.config import MakeConfig
from tests.helpers.evmstack import PING_TOPIC, deploy_emitter, ping, rpc
from tests.helpers.procs import stop
from tests.helpers.relay import RESULTS, NodeRelay
from tests.helpers.served import Served, served

pytestmark = pytest.mark.slow  # a Hardhat node of its own, a few thousand blocks


@pytest.fixture(scope="module")
def chain_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Hardhat node of this module's own (the blocks mined here stay out of the others')."""
    reason = hh.missing()
    if reason is not None:
        pytest.skip(reason)
    url, proc = hh.start(tmp_path_factory.mktemp("hardhat") / "hardhat.log")
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def emitter(chain_node: str) -> str:
    """An event emitter with 40 events spread over ~4,000 blocks; its address."""
    import asyncio

    async def build() -> str:
        sender, contract = await deploy_emitter(chain_node)
        for n in range(40):
            await ping(chain_node, sender, contract, n)
            if n % 3 == 0:
                await ping(chain_node, sender, contract, 1000 + n)
            await rpc(chain_node, "hardhat_mine", [hex(97)])
        return contract

    return asyncio.run(build())


async def _post(url: str, method: str, params: list[Any], call_id: Any = 7) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": call_id, "method": method, "params": params}
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        answer: dict[str, Any] = await resp.json(content_type=None)
        answer["_headers"] = dict(resp.headers)
        return answer


def _config(make_config: MakeConfig, nodes: list[Any], **raw: Any) -> Config:
    return make_config(
        {
            "server": {"metrics_listen": ""},
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            "networks": {"bsc": {"upstreams": nodes}},
            **raw,
        }
    )


@pytest.fixture
async def relays(chain_node: str) -> AsyncIterator[tuple[NodeRelay, NodeRelay]]:
    async with (
        NodeRelay(chain_node, max_logs_range=500) as geth_words,
        NodeRelay(chain_node, max_logs_range=300, refusal=RESULTS) as results_words,
    ):
        yield geth_words, results_words


async def test_a_wide_range_equals_the_nodes_own_answer(
    make_config: MakeConfig,
    api_key: str,
    chain_node: str,
    emitter: str,
    relays: tuple[NodeRelay, NodeRelay],
) -> None:
    geth_words, results_words = relays
    cfg = _config(
        make_config,
        [
            {"url": geth_words.url, "name": "limited"},
            # declares more than it takes: its refusals teach the rest
            {"url": results_words.url, "name": "results", "max_logs_range": 1000},
        ],
    )
    head = int(await rpc(chain_node, "eth_blockNumber", []), 16)
    assert head > 3_900
    wanted = [
        {"fromBlock": "0x1", "toBlock": "latest", "address": emitter},
        {"fromBlock": "0x0", "toBlock": hex(head - 10), "topics": ["0x" + PING_TOPIC]},
        {"fromBlock": hex(17), "toBlock": hex(3_917), "address": [emitter]},
    ]
    async with served(cfg) as gw:
        url = f"{gw.url}/bsc/{api_key}"
        for spec in wanted:
            direct = await rpc(chain_node, "eth_getLogs", [spec])
            assert len(direct) > 30
            through = await _post(url, "eth_getLogs", [spec])
            assert through.get("error") is None, through
            assert through["result"] == direct  # complete and in order
            assert through["id"] == 7
            served_by = set(through["_headers"]["X-Gateway-Node"].split(","))
            assert served_by <= {"limited", "results", "cache"}, served_by
        # Both nodes refused in their own words, and what they answered was within their limits.
        assert geth_words.refused >= 1 and results_words.refused >= 1
        answered = [
            _span(p[0], head)
            for relay, limit in ((geth_words, 500), (results_words, 300))
            for p in relay.calls("eth_getLogs")
            if _span(p[0], head) <= limit
        ]
        assert len(answered) >= 8  # ~4,000 blocks in chunks of at most 500
        # The limits were learnt: a new wide call is refused by no node.
        before = geth_words.refused + results_words.refused
        spec = {"fromBlock": hex(5), "toBlock": hex(3_905), "address": emitter}
        through = await _post(url, "eth_getLogs", [spec])
        assert through["result"] == await rpc(chain_node, "eth_getLogs", [spec])
        assert geth_words.refused + results_words.refused == before
        # at most logs_split_concurrency (4) chunks of one call at the nodes at once
        most = sum(r.most_in_flight["eth_getLogs"] for r in relays)
        assert 1 < most <= 8  # two nodes, each at most the call's 4
        # a filter's poll reads through the same split
        flt = await _post(url, "eth_newFilter", [{"fromBlock": "0x1", "address": emitter}])
        logs = await _post(url, "eth_getFilterLogs", [flt["result"]])
        wanted_logs = {"fromBlock": "0x1", "toBlock": "latest", "address": emitter}
        assert logs["result"] == await rpc(chain_node, "eth_getLogs", [wanted_logs])


async def test_final_chunks_are_cached_on_their_own(
    make_config: MakeConfig,
    api_key: str,
    chain_node: str,
    emitter: str,
) -> None:
    async with NodeRelay(chain_node) as node:
        cfg = _config(make_config, [{"url": node.url, "name": "n1", "max_logs_range": 1000}])
        async with served(cfg) as gw:
            url = f"{gw.url}/bsc/{api_key}"
            await _wait_finalized(gw, 3_000)
            spec = {"fromBlock": "0x1", "toBlock": hex(3_000), "address": emitter}
            first = await _post(url, "eth_getLogs", [spec])
            asked = len(node.calls("eth_getLogs"))
            assert asked == 3  # 1..1000, 1001..2000, 2001..3000
            # The same blocks in another wide call: every chunk from the cache.
            again = await _post(url, "eth_getLogs", [spec], call_id="x")
            assert again["result"] == first["result"] and again["id"] == "x"
            assert len(node.calls("eth_getLogs")) == asked


async def test_a_split_call_is_charged_once(
    make_config: MakeConfig, api_key: str, chain_node: str, emitter: str
) -> None:
    async with NodeRelay(chain_node, max_logs_range=400) as node:
        cfg = _config(make_config, [node.url])
        weight = cfg.plan("free").cost("eth_getLogs")
        cfg = _config(
            make_config,
            [node.url],
            plans={"free": {"rate": 0.001, "burst": weight}},
        )
        async with served(cfg) as gw:
            url = f"{gw.url}/bsc/{api_key}"
            spec = {"fromBlock": "0x1", "toBlock": hex(3_000), "address": emitter}
            first = await _post(url, "eth_getLogs", [spec])
            assert first.get("error") is None and len(first["result"]) > 20
            assert len(node.calls("eth_getLogs")) > 5  # many node calls ...
            second = await _post(url, "eth_getLogs", [spec])
            assert second["error"]["code"] == -32005  # ... one call's weight


async def _wait_finalized(gw: Served, block: int) -> None:
    """Until the gateway counts ``block`` as final (Hardhat's finalized is its head)."""
    import asyncio

    from gateway.typedefs import POOLS

    pool = gw.app[POOLS]["bsc"]
    for _ in range(200):
        if pool.intel.heads.head.finalized >= block:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"finalized stayed at {pool.intel.heads.head.finalized}")


def _span(spec: dict[str, Any], head: int) -> int:
    def number(ref: str) -> int:
        return head if ref in ("latest", "pending") else 0 if ref == "earliest" else int(ref, 16)

    return number(spec.get("toBlock", "latest")) - number(spec.get("fromBlock", "latest")) + 1


async def test_a_split_call_has_one_deadline(
    make_config: MakeConfig, api_key: str, chain_node: str, emitter: str
) -> None:
    """30 chunks of 0.6 s each, 4 at a time, would take 4.5 s: the call's 1 s deadline ends it."""
    import time

    async with NodeRelay(chain_node, delay={"eth_getLogs": 0.6}) as slow:
        cfg = _config(
            make_config,
            [{"url": slow.url, "name": "slow", "max_logs_range": 100}],
            limits={"upstream_timeout_s": 1.0},
            hedge={"enabled": False},
        )
        async with served(cfg) as gw:
            spec = {"fromBlock": "0x1", "toBlock": hex(3_000), "address": emitter}
            started = time.monotonic()
            answer = await _post(f"{gw.url}/bsc/{api_key}", "eth_getLogs", [spec])
            elapsed = time.monotonic() - started
    assert answer["error"]["code"] == -32603, answer
    assert elapsed < 3.5  # not the chunks' sum
    assert len(slow.calls("eth_getLogs")) < 30


async def test_a_wide_range_goes_whole_to_the_node_that_takes_it(
    make_config: MakeConfig, api_key: str, chain_node: str, emitter: str
) -> None:
    """A free-tier node (5 blocks) beside one with no limit: no 800 five-block chunks."""
    async with (
        NodeRelay(chain_node, max_logs_range=5) as tiny,
        NodeRelay(chain_node) as whole,
    ):
        nodes = [{"url": tiny.url, "name": "tiny", "max_logs_range": 5}, whole.url]
        cfg = _config(make_config, nodes)
        async with served(cfg) as gw:
            spec = {"fromBlock": "0x1", "toBlock": hex(4_000), "address": emitter}
            for _ in range(3):
                through = await _post(f"{gw.url}/bsc/{api_key}", "eth_getLogs", [spec])
                assert through["result"] == await rpc(chain_node, "eth_getLogs", [spec])
            small = {"fromBlock": "0x10", "toBlock": "0x12", "address": emitter}
            for n in range(4):  # narrow ranges: either node (another id each: no cache)
                await _post(f"{gw.url}/bsc/{api_key}", "eth_getLogs", [small], call_id=n)
    assert tiny.refused == 0
    assert all(_span(p[0], 4_000) <= 5 for p in tiny.calls("eth_getLogs"))
    asked = len(whole.calls("eth_getLogs")) + len(tiny.calls("eth_getLogs"))
    assert 1 <= asked <= 8  # the wide call once (then cached), the narrow ones: never 800 chunks
