"""A poll is bounded in time and in size, and learns what a node takes.

Through the real app and chain mock nodes (one log per block): a poll's
node reads share one deadline (``limits.upstream_timeout_s``); its
``eth_getLogs`` answer stays within ``filters.max_poll_bytes`` (fewer blocks
per poll, the rest next poll, every log once); and the span that went
through is remembered, so the next poll does not halve again from the whole
range (before: up to log2(range)+1 node scans per poll, each with its own
full deadline, while the filter gained a block or so per poll).
"""

from __future__ import annotations

import time

import orjson

from gateway.demo.chainnode import Chain, ChainNode
from tests.integration import test_filters as _tf
from tests.integration.test_filters import AppFactory, moved, numbers, rpc

# The filter tests' fixtures: chain mock nodes behind the real app.
chain, nodes, make_app = _tf.chain, _tf.nodes, _tf.make_app

SMALL_POLLS = {
    "plans": {"free": {"rate": 100_000, "burst": 100_000, "max_logs_range": 5_000}},
    "filters": {"max_poll_bytes": 8192},
}


def scans(nodes: list[ChainNode]) -> int:
    return sum(n.by_method["eth_getLogs"] for n in nodes)


async def test_a_poll_stays_within_its_bytes_and_remembers_the_span_that_worked(
    make_app: AppFactory, chain: Chain, nodes: list[ChainNode], api_key: str
) -> None:
    client = await make_app(SMALL_POLLS)
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    await moved(client, chain, 1_000)
    before = scans(nodes)
    first = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    halvings = scans(nodes) - before
    assert halvings > 3  # 1,000 blocks of logs are far more than 8 KiB: halved
    assert 0 < len(orjson.dumps(first)) <= 8192
    got = numbers(first)
    before = scans(nodes)
    second = (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"]
    assert scans(nodes) - before == 1  # started from the span that worked: one scan
    assert len(orjson.dumps(second)) <= 8192
    got += numbers(second)
    polls = 2
    while len(got) < 1_000 and polls < 200:
        answer = await rpc(client, api_key, "eth_getFilterChanges", [fid])
        assert answer["_status"] == 200, answer
        assert len(orjson.dumps(answer["result"])) <= 8192
        got += numbers(answer["result"])
        polls += 1
    assert got == list(range(5_001, 6_001))  # every log once, in order, none lost
    # the span is remembered, not the halving: scans per poll stay near one
    assert scans(nodes) - before < 2 * (polls - 1)


async def test_a_polls_node_reads_share_one_deadline(
    make_app: AppFactory, chain: Chain, nodes: list[ChainNode], api_key: str
) -> None:
    """Each read 0.4 s, a poll that needs many of them, upstream_timeout_s 1.2: the poll
    answers 504 at its one deadline (before: every read had its own full deadline)."""
    client = await make_app({**SMALL_POLLS, "limits": {"upstream_timeout_s": 1.2}})
    fid = (await rpc(client, api_key, "eth_newFilter", [{}]))["result"]
    await moved(client, chain, 1_000)
    for node in nodes:
        node.hold_s = 0.4
    started = time.monotonic()
    answer = await rpc(client, api_key, "eth_getFilterChanges", [fid])
    elapsed = time.monotonic() - started
    assert answer["_status"] == 504, answer
    assert answer["error"]["code"] == -32603 and "1.2" in answer["error"]["data"]["reason"]
    assert elapsed < 4 * 0.4 + 1.0, elapsed  # one deadline, not one per read
    # what the stopped poll learnt stays: once the nodes are quick, polls go through
    for node in nodes:
        node.hold_s = None
    answer = await rpc(client, api_key, "eth_getFilterChanges", [fid])
    assert answer["_status"] == 200 and numbers(answer["result"])[0] == 5_001, answer
