"""eth_getLogs node calls are bounded, and the call that teaches a node's limit is answered.

A mock chain's node sits behind a relay that refuses wide log ranges in a
node's own words (geth's "exceed maximum block range: N", Infura's "query
returned more than 10000 results"); the relay counts every eth_getLogs it
receives, so the tests can say how many node calls one client call cost.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.demo.mockws import Chain, start_ws_node
from tests.helpers.headnodes import HeadGateway, head_gateway, mock_chains  # noqa: F401
from tests.helpers.relay import GETH_RANGE, RESULTS, NodeRelay


async def _logs_calls(gw: HeadGateway, relay: NodeRelay, spec: dict[str, Any]) -> tuple[Any, int]:
    """The gateway's answer to one eth_getLogs and the node calls it made at the relay."""
    before = len(relay.calls("eth_getLogs"))
    status, answer = await gw.call("eth_getLogs", [spec])
    assert status == 200, (status, answer)
    return answer, len(relay.calls("eth_getLogs")) - before


async def test_a_range_of_one_block_per_call_costs_at_most_64_node_calls(
    gw: HeadGateway, chains: dict[str, Chain]
) -> None:
    """A node taking one block per call: a 10,000-block call is refused -32602 naming
    the widest range the gateway answers, with at most 64 node calls, before and after
    the limit is learnt."""
    chain = chains["bsc"]
    chain.mine(10)
    node = await start_ws_node(chain)
    opbnb = await start_ws_node(chains["opbnb"])
    async with NodeRelay(node.url, max_logs_range=1, refusal=GETH_RANGE) as relay:
        await gw.start({}, {"bsc": [relay.url], "opbnb": [opbnb.url]})
        high = chain.head
        spec = {"fromBlock": hex(high - 9_999), "toBlock": hex(high)}
        for _ in range(2):  # before the limit is learnt, then after
            answer, calls = await _logs_calls(gw, relay, spec)
            assert calls <= 64, calls
            print(f"range 1, 10,000 blocks: {calls} node calls")
            error = answer["error"]
            assert error["code"] == -32602, answer
            assert error["message"].startswith("Invalid params: eth_getLogs over 10000 blocks")
            assert error["data"]["node_logs_range"] == 1
            assert error["data"]["max_logs_range"] == 64
        # 64 blocks is what the gateway then answers, equal to the node's own answer
        narrow = {"fromBlock": hex(high - 63), "toBlock": hex(high)}
        answer, calls = await _logs_calls(gw, relay, narrow)
        assert answer["result"] == chain.get_logs(narrow)
        assert calls == 64


@pytest.mark.parametrize(
    ("limit", "words"),
    [(300, RESULTS), (300, GETH_RANGE), (300, "block range too large")],
    ids=["infura", "geth", "too-large"],
)
async def test_the_call_that_teaches_a_limit_is_answered(
    gw: HeadGateway, chains: dict[str, Chain], limit: int, words: str
) -> None:
    """The first 4,000-block call to a node with an unknown limit equals a node without one."""
    chain = chains["bsc"]
    chain.mine(10)
    node = await start_ws_node(chain)
    opbnb = await start_ws_node(chains["opbnb"])
    async with NodeRelay(node.url, max_logs_range=limit, refusal=words) as relay:
        await gw.start({}, {"bsc": [relay.url], "opbnb": [opbnb.url]})
        high = chain.head
        spec = {"fromBlock": hex(high - 3_999), "toBlock": hex(high)}
        wanted = chain.get_logs(spec)
        assert len(wanted) > 100
        answer, first = await _logs_calls(gw, relay, spec)
        assert answer.get("result") == wanted, answer.get("error")
        assert relay.refused >= 1
        assert first <= 64
        answer, second = await _logs_calls(gw, relay, spec)
        assert answer.get("result") == wanted
        print(f"{words!r}: node calls first {first}, then {second}")


class _ReorgRelay(NodeRelay):
    """Once armed: answers the first eth_getLogs, then re-orgs the chain's newest
    ``depth`` blocks; the call's other chunks reach the node after the re-org."""

    def __init__(self, url: str, chain: Chain, depth: int, **kw: Any) -> None:
        super().__init__(url, **kw)
        self.chain, self.depth = chain, depth
        self.armed = False
        self.reorged = asyncio.Event()

    async def _one(self, call: dict[str, Any]) -> dict[str, Any]:
        if call.get("method") != "eth_getLogs" or not self.armed:
            return await super()._one(call)
        if self.reorged.is_set() or self.depth < 0:
            await self.reorged.wait()
            return await super()._one(call)
        depth, self.depth = self.depth, -1
        answer = await super()._one(call)  # read on the old fork
        self.chain.reorg(depth)
        self.reorged.set()
        return answer


async def test_a_reorg_during_a_split_never_merges_two_forks(
    gw: HeadGateway, chains: dict[str, Chain]
) -> None:
    """A 6-block range at the head in 3 chunks, the chain re-orging all 6
    blocks while the chunks are read: the answer is the new fork's logs, one chain."""
    chain = chains["bsc"]
    chain.finality_depth = 15  # the 6 blocks stay above the finalized one: they may re-org
    chain.mine(20)
    node = await start_ws_node(chain)
    opbnb = await start_ws_node(chains["opbnb"])
    relay = _ReorgRelay(node.url, chain, 6, max_logs_range=2)
    async with relay:
        await gw.start({}, {"bsc": [relay.url], "opbnb": [opbnb.url]})
        high = chain.head
        spec = {"fromBlock": hex(high - 5), "toBlock": hex(high)}
        await gw.result("eth_getLogs", [spec])  # teaches the node's limit of 2
        chain.mine(1)
        high = chain.head
        spec = {"fromBlock": hex(high - 5), "toBlock": hex(high)}
        relay.armed = True  # the first chunk is read, then all 6 blocks re-org
        got = await gw.result("eth_getLogs", [spec])
        assert relay.reorged.is_set()
        wanted = chain.get_logs(spec)
        assert len({log["blockNumber"] for log in wanted}) >= 4
        assert got == wanted
