"""Failover without gaps: node sockets drop or stall; heads stay consecutive and
unique; logs of re-organised blocks come again with ``removed: true``."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.demo.mockws import Chain, header_of
from gateway.telemetry.metrics import METRICS
from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually, notes, rpc

HEADS = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
LOGS = {"jsonrpc": "2.0", "id": 2, "method": "eth_subscribe", "params": ["logs", {}]}


@pytest.fixture
def ws_raw() -> dict[str, Any]:
    return {"ws": {"reconnect_delay_s": 0.05, "head_stall_s": 0.6}}


def _active(stack: WsStack) -> list[int]:
    """Indices of the bsc nodes that hold a subscription now."""
    return [i for i, n in enumerate(stack.nodes["bsc"]) if n.active_subscriptions]


class Collector:
    """Reads every frame of a socket in the background."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.items: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._read(ws))

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            self.items.append(orjson.loads(msg.data))

    def results(self) -> list[Any]:
        return [i["params"]["result"] for i in self.items if i.get("method") == "eth_subscription"]


def _numbers(results: list[Any]) -> list[int]:
    return [int(r["number"], 16) for r in results]


async def test_heads_continue_on_another_node_without_gaps_or_duplicates(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await rpc(ws, HEADS)
    start = chain.head + 1
    got = Collector(ws)
    chain.mine(2)
    (first,) = _active(stack)
    node = stack.nodes["bsc"][first]
    node.down = True
    await node.drop()
    chain.mine(5)  # missed by everyone's subscription: filled by number
    await eventually(lambda: _active(stack) == [1 - first])
    chain.mine(3)
    await eventually(lambda: len(got.results()) >= 10)
    await asyncio.sleep(0.2)
    results = got.results()
    assert _numbers(results) == list(range(start, chain.head + 1))
    assert results == [header_of(_block(chain, n)) for n in range(start, chain.head + 1)]
    svc = stack.app[WS]
    await svc.charge_once()
    registry = stack.app[METRICS].registry
    assert registry.get_sample_value("gateway_ws_upstream_failovers_total", {"network": "bsc"}) == 1
    filled = registry.get_sample_value("gateway_ws_gap_filled_total", {"network": "bsc"})
    assert filled is not None and filled >= 5
    await ws.close()


async def test_a_head_gap_on_a_live_node_is_filled_and_a_step_back_never_sent(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await rpc(ws, HEADS)
    start = chain.head + 1
    got = Collector(ws)
    chain.mine()
    (first,) = _active(stack)
    node = stack.nodes["bsc"][first]
    await eventually(lambda: len(got.results()) == 1)
    node.muted = True
    chain.mine(3)  # this node skipped them
    node.muted = False
    chain.mine()
    await eventually(lambda: len(got.results()) == 5)
    chain.reorg(2)  # the node sends heads of numbers already sent: dropped
    chain.mine()
    await eventually(lambda: len(got.results()) >= 6)
    await asyncio.sleep(0.2)
    assert _numbers(got.results()) == list(range(start, chain.head + 1))
    await ws.close()


async def test_a_stalled_node_is_left_and_the_gap_filled(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await rpc(ws, HEADS)
    start = chain.head + 1
    got = Collector(ws)
    chain.mine()
    (first,) = _active(stack)
    stack.nodes["bsc"][first].muted = True  # open but silent: fallen behind
    for _ in range(12):
        chain.mine()
        await asyncio.sleep(0.1)
    await eventually(lambda: len(got.results()) == chain.head - start + 1, wait_s=5)
    assert _numbers(got.results()) == list(range(start, chain.head + 1))
    assert 1 - first in _active(stack)
    await ws.close()


async def test_logs_of_blocks_reorganised_during_failover_are_sent_again_removed(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    chain.logs_per_block = 2
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    sid = (await rpc(ws, LOGS))["result"]
    got = Collector(ws)
    chain.mine(2)
    old = chain.logs(chain.head - 1) + chain.logs(chain.head)
    await eventually(lambda: len(got.results()) == 4)
    (first,) = _active(stack)
    node = stack.nodes["bsc"][first]
    node.down = True
    await node.drop()
    chain.reorg(1)  # the newest block is replaced while nobody listens
    chain.mine(1)
    await eventually(lambda: len(got.results()) >= 4 + 2 + 2 + 2)
    await asyncio.sleep(0.2)
    results = got.results()
    replaced = [dict(log, removed=True) for log in old[2:]]
    assert results[:4] == old
    assert results[4:6] == replaced
    new_tail = chain.logs(chain.head - 1) + chain.logs(chain.head)
    assert results[6:] == new_tail
    assert all(i["params"]["subscription"] == sid for i in got.items if "params" in i)
    await ws.close()


async def test_logs_reorg_on_a_live_node_is_relayed(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    chain.logs_per_block = 1
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await rpc(ws, LOGS)
    chain.mine()
    before = chain.logs(chain.head)
    (note,) = await notes(ws, 1)
    assert note["params"]["result"] == before[0]
    chain.reorg(1)
    removed, again = await notes(ws, 2)
    assert removed["params"]["result"] == dict(before[0], removed=True)
    assert again["params"]["result"] == chain.logs(chain.head)[0]
    await ws.close()


def _block(chain: Chain, number: int) -> dict[str, Any]:
    block = chain.block(number)
    assert block is not None
    return block
