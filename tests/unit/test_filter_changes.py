"""What a filter poll returns (gateway/filters/changes.py) against a scripted chain."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.filters.changes import NodeCall, block_changes, logs_changes
from gateway.filters.logsread import HalvingReader
from gateway.intel.head import NetworkHead
from gateway.rpc.params import LogFilter, read_filter

A = "0x" + "aa" * 20
T = "0x" + "11" * 32


class FakeChain:
    """Blocks by number with a fork generation; one log per block; counts node calls."""

    def __init__(self, head: int) -> None:
        self.head = head
        self.gen: dict[int, int] = {}
        self.calls: list[str] = []
        self.specs: list[dict[str, Any]] = []  # the eth_getLogs filters asked for

    def hash(self, n: int) -> str:
        return f"0x{n:062x}{self.gen.get(n, 0):02x}"

    def reorg(self, depth: int) -> None:
        for n in range(self.head - depth + 1, self.head + 1):
            self.gen[n] = self.gen.get(n, 0) + 1

    def log(self, n: int) -> dict[str, Any]:
        return {
            "address": A,
            "blockNumber": hex(n),
            "blockHash": self.hash(n),
            "logIndex": "0x0",
            "removed": False,
        }

    def at(self) -> NetworkHead:
        return NetworkHead(self.head, self.hash(self.head), safe=-1, finalized=self.head - 20)

    async def __call__(self, method: str, params: list[Any]) -> bytes:
        self.calls.append(method)
        if method == "eth_getBlockByNumber":
            n = int(params[0], 16)
            return orjson.dumps({"hash": self.hash(n)} if n <= self.head else None)
        assert method == "eth_getLogs"
        spec = params[0]
        self.specs.append(spec)
        low, high = int(spec["fromBlock"], 16), int(spec["toBlock"], 16)
        return orjson.dumps([self.log(n) for n in range(low, min(high, self.head) + 1)])


async def poll(
    chain: FakeChain, state: tuple[int, list[list[Any]]], **kw: Any
) -> tuple[list[Any], tuple[int, list[list[Any]]]]:
    call: NodeCall = chain
    opts = {"span": 0, "reorg_polls": 4, "remember_bytes": 1 << 20, **kw}
    opts.setdefault("read_logs", HalvingReader(call, call))
    out, nxt, seen = await logs_changes(LogFilter(), state[0], state[1], chain.at(), call, **opts)
    return out, (nxt, orjson.loads(orjson.dumps(seen)))  # as it goes through Redis


def nums(logs: list[Any], removed: bool = False) -> list[int]:
    return [int(g["blockNumber"], 16) for g in logs if g["removed"] is removed]


async def test_no_new_block_costs_no_node_call() -> None:
    chain = FakeChain(100)
    state = (101, [[100, chain.hash(100), []]])
    out, state = await poll(chain, state)
    assert out == [] and chain.calls == []  # the head's own hash vouches for the last poll


async def test_a_reorg_deeper_than_one_poll_removes_only_what_changed() -> None:
    chain = FakeChain(100)
    state: tuple[int, list[list[Any]]] = (101, [[100, chain.hash(100), []]])
    for _ in range(3):  # polls delivering 101-102, 103-104, 105-106
        chain.head += 2
        out, state = await poll(chain, state)
    chain.reorg(3)  # 104-106 replaced; 103 (in the second poll) stays
    chain.head += 1
    out, state = await poll(chain, state)
    assert nums(out, removed=True) == [104, 105, 106]
    assert nums(out) == [104, 105, 106, 107]
    assert all(
        g["blockHash"] == chain.hash(int(g["blockNumber"], 16)) for g in out if not g["removed"]
    )
    out, state = await poll(chain, state)
    assert out == []


async def test_logs_too_big_to_remember_are_not_sent_as_removed() -> None:
    chain = FakeChain(100)
    state: tuple[int, list[list[Any]]] = (101, [])
    chain.head += 2
    out, state = await poll(chain, state, remember_bytes=10)
    assert nums(out) == [101, 102] and state[1][-1][2] is None
    chain.reorg(1)
    out, state = await poll(chain, state, remember_bytes=10)
    assert nums(out, removed=True) == [] and nums(out) == [102]  # the new 102 still comes


async def test_span_per_poll_and_the_filters_to_block() -> None:
    chain = FakeChain(100)
    state: tuple[int, list[list[Any]]] = (101, [])
    chain.head = 110
    crit = LogFilter(to_block=107)
    got = []
    for _ in range(3):
        out, nxt, seen = await logs_changes(
            crit,
            state[0],
            state[1],
            chain.at(),
            chain,
            span=4,
            reorg_polls=4,
            remember_bytes=0,
            read_logs=HalvingReader(chain, chain),
        )
        state = (nxt, seen)
        got.append(nums(out))
    assert got == [[101, 102, 103, 104], [105, 106, 107], []]


async def test_block_filter_reports_each_block_once_and_caps_a_poll() -> None:
    chain = FakeChain(100)
    nxt, seen = 101, [[100, chain.hash(100), None]]
    chain.head = 105
    hashes, nxt, seen = await block_changes(
        nxt, seen, chain.at(), chain, max_blocks=3, reorg_polls=8
    )
    assert hashes == [chain.hash(n) for n in (101, 102, 103)]
    hashes, nxt, seen = await block_changes(
        nxt, seen, chain.at(), chain, max_blocks=3, reorg_polls=8
    )
    assert hashes == [chain.hash(n) for n in (104, 105)]
    chain.reorg(2)
    hashes, nxt, seen = await block_changes(
        nxt, seen, chain.at(), chain, max_blocks=3, reorg_polls=8
    )
    assert hashes == [chain.hash(104), chain.hash(105)]  # the new blocks at those heights


async def test_a_poll_asks_for_the_filter_as_geth_read_it_over_its_own_range() -> None:
    """The one Go-style reader (rpc.params): case variants, last wins; the range is the poll's."""
    crit = read_filter(
        {
            "address": "0x" + "bb" * 20,
            "ADDRESS": [A],
            "Topics": [T, None],
            "fromBlock": "0x1",
            "toblock": "0x6a",
        }
    )
    assert isinstance(crit, LogFilter)
    chain = FakeChain(105)
    opts = {"span": 0, "reorg_polls": 4, "remember_bytes": 1 << 20}
    await logs_changes(
        crit, 101, [], chain.at(), chain, read_logs=HalvingReader(chain, chain), **opts
    )
    assert chain.specs == [
        {"address": [A], "topics": [T, None], "fromBlock": hex(101), "toBlock": hex(105)}
    ]
    refused: Any
    for refused in ({"topics": "x"}, {"fromBlock": "0x010"}, {"blockHash": T, "fromBlock": "0x1"}):
        assert isinstance(read_filter(refused), str)
