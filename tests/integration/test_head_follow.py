"""The head's promise against real sockets: the head from newHeads, no answer without a node,
chain ids verified, failure lines that name the upstream.

The nodes are ``gateway.demo.mockws`` nodes (HTTP and WebSocket on one port,
``ws_upstreams`` derived from the HTTP URL), the chain mining on a timer;
the gateway is the real app on a real port with the test Redis.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from typing import Any

import pytest

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mockws import Chain, start_ws_node
from gateway.ops.logsetup import formatter
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import Client, MakeConfig
from tests.helpers.headnodes import HeadGateway, head_gateway, mock_chains  # noqa: F401
from tests.helpers.readyz import readyz_details
from tests.helpers.scrape import by_node
from tests.helpers.waiting import eventually

JSON = {"Content-Type": "application/json"}


async def _app(gw: HeadGateway, upstreams: dict[str, list[str]], **upstream: Any) -> Client:
    # probe_interval_s 3 (the shipped default): only newHeads can keep the head fresh
    return await gw.start({"upstream": {"probe_interval_s": 3.0, **upstream}}, upstreams)


async def _lags(gw: HeadGateway, chain: Chain, seconds: float, network: str = "bsc") -> list[int]:
    """For ``seconds``: eth_blockNumber and latest, each answer's blocks behind the node."""
    lags: list[int] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for method, params in (
            ("eth_blockNumber", []),
            ("eth_getBlockByNumber", ["latest", False]),
        ):
            status, answer = await gw.call(method, params, network)
            at_node = chain.head  # the node's head at the moment the answer arrived
            assert status == 200, answer
            result = answer["result"]
            number = int(result if isinstance(result, str) else result["number"], 16)
            lags.append(at_node - number)
        await asyncio.sleep(0.03)
    return lags


def _assert_head_promise(lags: list[int]) -> None:
    """>= 95 % of answers at most 1 block behind the node, none more than 2."""
    within_one = sum(1 for lag in lags if lag <= 1) / len(lags)
    assert len(lags) > 50 and within_one >= 0.95 and max(lags) <= 2, sorted(lags)[-10:]


async def test_latest_follows_newheads_within_a_block(
    gw: HeadGateway,
    chains: dict[str, Chain],
) -> None:
    """Mining every 500 ms: >= 95 % of answers at most 1 block behind the node, none > 2."""
    chain = chains["bsc"]
    chain.block_time_s = 0.5
    bsc = await start_ws_node(chain)
    opbnb = await start_ws_node(chains["opbnb"])
    client = await _app(gw, {"bsc": [bsc.url], "opbnb": [opbnb.url]})
    await eventually(lambda: bsc.subscriptions("newHeads") == 1, 5.0)
    chain.start()
    _assert_head_promise(await _lags(gw, chain, 6.0))
    # answers came from the head, not the node (only the first, before any newHeads)
    pool = client.app[T.POOLS]["bsc"]
    assert pool.intel.heads.head.number >= chain.head - 1
    assert bsc.calls.count("eth_blockNumber") <= 1


async def test_no_node_in_service_answers_502_but_final_answers_stay(
    gw: HeadGateway,
    chains: dict[str, Chain],
) -> None:
    nodes = [await start_ws_node(chains["bsc"]) for _ in range(2)]
    opbnb = await start_ws_node(chains["opbnb"])
    client = await _app(gw, {"bsc": [n.url for n in nodes], "opbnb": [opbnb.url]})
    await eventually(lambda: all(n.subscriptions("newHeads") == 1 for n in nodes), 5.0)
    assert (await gw.call("eth_chainId", []))[0] == 200  # cached for good
    status, before = await gw.call("eth_blockNumber", [])
    assert status == 200
    for node in nodes:  # both nodes go away (HTTP refused, sockets closed)
        node.down = True
        await node.drop()
    started = time.monotonic()
    while True:
        status, answer = await gw.call("eth_blockNumber", [])
        if status != 200:
            break
        assert time.monotonic() - started < 3.0, "kept answering a head nobody vouches for"
        await asyncio.sleep(0.05)
    assert status == 502 and answer["error"]["code"] == -32603, answer
    status, answer = await gw.call("eth_getBlockByNumber", ["latest", False])
    assert status == 502 and answer["error"]["code"] == -32603
    status, answer = await gw.call("eth_chainId", [])
    assert status == 200 and answer["result"] == "0x38"  # immutable: still served
    for node in nodes:
        node.down = False
    await eventually(lambda: client.app[T.POOLS]["bsc"].serving(), 8.0)
    status, after = await gw.call("eth_blockNumber", [])
    assert status == 200 and int(after["result"], 16) >= int(before["result"], 16)


async def test_a_node_of_another_chain_gets_no_calls_and_is_reported(
    gw: HeadGateway,
    chains: dict[str, Chain],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A chain-204 node listed under bsc: out of rotation, logged, in /readyz and a metric."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    good = await start_ws_node(chains["bsc"])
    wrong = await start_ws_node(chains["opbnb"])
    key = "0123456789abcdef0123456789abcdef"
    wrong_url = f"http://u:secretpw@{wrong.url[len('http://') :]}/?apikey={key}"
    client = await _app(
        gw,
        {"bsc": [good.url, wrong_url], "opbnb": [wrong.url]},
        ws_heads=False,  # the mock's socket is on "/", not on the keyed path
    )
    for _ in range(10):
        status, answer = await gw.call("eth_gasPrice", [])
        assert status == 200
        status, answer = await gw.call("net_version", [])
        assert answer["result"] == "56"
    assert (await gw.call("eth_chainId", []))[1]["result"] == "0x38"
    client_calls = [m for m in wrong.calls if m in ("eth_gasPrice", "net_version")]
    assert client_calls == [], "a wrong-chain node was sent client calls"
    assert client.app[T.POOLS]["bsc"].nodes[1].chain_id == 204
    _, body = await readyz_details(client.app)
    node = body["networks"]["bsc"]["upstreams"][1]
    assert node["verified"] is False and node["chain_id"] == 204
    assert node["error"] == "chain id 204, expected 56"
    assert node["url"] == f"http://***@{wrong.url[len('http://') :]}/?apikey=***"
    line = next(r for r in caplog.records if r.getMessage().startswith("upstream on the wrong"))
    assert "network=bsc node=bsc-1" in line.getMessage()
    assert "chain_id=204 expected=56" in line.getMessage()
    assert "secretpw" not in caplog.text and key not in caplog.text
    # the same line as JSON (log.format = "json") carries the fields as keys
    fields = json.loads(formatter("json").format(line))
    assert fields["level"] == "WARNING" and fields["logger"] == "gateway.upstream"
    assert (fields["node"], fields["chain_id"], fields["expected_chain_id"]) == ("bsc-1", 204, 56)
    assert fields["target"] == node["url"]
    mismatch = await by_node(client.app[METRICS], "gateway_upstream_chain_mismatch")
    assert mismatch == {"bsc-0": 0.0, "bsc-1": 1.0, "opbnb-0": 0.0}


async def test_a_newheads_socket_on_another_chain_moves_no_head(
    gw: HeadGateway,
    chains: dict[str, Chain],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``ws_upstreams`` is configured apart from the HTTP URL the probe verifies: a
    socket on chain 204 (heads at 50,000,000) under bsc must never move bsc's head."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    good = await start_ws_node(chains["bsc"])
    wrong = await start_ws_node(chains["opbnb"])
    chains["opbnb"].block_time_s = 0.1
    chains["opbnb"].start()
    client = await gw.start(
        {"networks": {"bsc": {"ws_upstreams": ["ws" + wrong.url[len("http") :]]}}},
        {"bsc": [good.url], "opbnb": [wrong.url]},
    )
    await eventually(lambda: "expected 0x38" in caplog.text, 5.0)
    await asyncio.sleep(0.5)  # blocks of the wrong chain keep coming meanwhile
    status, answer = await gw.call("eth_blockNumber", [])
    assert status == 200 and int(answer["result"], 16) < 50_000_000, answer
    assert client.app[T.POOLS]["bsc"].intel.heads.head.number < 50_000_000
    line = next(r for r in caplog.records if "expected 0x38" in r.getMessage())
    assert "network=bsc node=bsc-0" in line.getMessage()


async def test_an_upstream_without_websocket_is_said_once(
    make_config: MakeConfig, aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Most public RPC URLs refuse the WebSocket handshake (4xx): one line saying the
    head is polled, then quiet retries, not a warning every backoff period."""
    caplog.set_level(logging.INFO, "gateway.upstream")
    cfg = make_config({"upstream": {"ws_reconnect_min_s": 0.05, "ws_reconnect_max_s": 0.1}})
    client: Client = await aiohttp_client(create_app(cfg))
    await eventually(lambda: "has no newHeads socket" in caplog.text, 5.0)
    await asyncio.sleep(1.0)  # about ten more refused handshakes per node
    said = [r.getMessage() for r in caplog.records if "newHeads" in r.getMessage()]
    networks = len(client.app[T.POOLS])
    assert len([m for m in said if "has no newHeads socket" in m]) == networks, said
    assert not [m for m in said if "newHeads failed" in m], said


async def test_probe_failure_lines_name_the_upstream_and_the_recovery(
    gw: HeadGateway,
    chains: dict[str, Chain],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.upstream")
    bsc = await start_ws_node(chains["bsc"])
    opbnb = await start_ws_node(chains["opbnb"])
    client = await _app(
        gw,
        {"bsc": [bsc.url], "opbnb": [opbnb.url]},
        probe_interval_s=0.1,
        failure_log_interval_s=60.0,
    )
    await eventually(lambda: bsc.subscriptions("newHeads") == 1, 5.0)
    bsc.down = True
    await bsc.drop()
    pool = client.app[T.POOLS]["bsc"]
    await eventually(lambda: not pool.serving(), 3.0)
    await asyncio.sleep(0.5)  # several failed probes: one line (rate-limited)
    bsc.down = False
    await eventually(lambda: pool.serving() and pool.nodes[0].newheads, 8.0)
    text = caplog.text
    failed = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("upstream probe failed network=bsc")
    ]
    assert len(failed) == 1, failed
    assert f"node=bsc-0 url={bsc.url} error=HTTPStatus: HTTP 503" in failed[0]
    assert "upstream newHeads failed network=bsc node=bsc-0" in text
    assert f"upstream in service network=bsc node=bsc-0 url={bsc.url}" in text.split(failed[0])[1]
    assert "upstream newHeads subscribed network=bsc node=bsc-0" in text.split(failed[0])[1]


@pytest.mark.parametrize("source", ["newheads", "polling"])
async def test_the_head_promise_holds_at_bsc_block_times(
    gw: HeadGateway,
    chains: dict[str, Chain],
    source: str,
) -> None:
    """A block every 0.45 s (BSC since Fermi), the block-time check on, two nodes: >= 95 %
    of eth_blockNumber and latest answers at most 1 block behind the node, none > 2, and
    no honest node taken out of rotation. With newHeads every header is confirmed over
    HTTP first; polling alone probes twice a block."""
    chain = chains["bsc"]
    chain.block_time_s = 0.45
    bsc = [await start_ws_node(chain) for _ in range(2)]
    opbnb = await start_ws_node(chains["opbnb"])
    client = await gw.start(
        {
            "upstream": {"probe_interval_s": 3.0, "ws_heads": source == "newheads"},
            "networks": {"bsc": {"block_time_s": 0.45}},
        },
        {"bsc": [n.url for n in bsc], "opbnb": [opbnb.url]},
    )
    if source == "newheads":
        await eventually(lambda: all(n.subscriptions("newHeads") == 1 for n in bsc), 5.0)
    chain.start()
    lags = await _lags(gw, chain, 8.0)
    print(f"{source}: {len(lags)} answers, lag histogram {dict(sorted(Counter(lags).items()))}")
    _assert_head_promise(lags)
    pool = client.app[T.POOLS]["bsc"]
    assert not [n.inconsistent for n in pool.nodes if n.inconsistent]


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize(("network", "block_time_s"), [("bsc", 0.45), ("opbnb", 0.25)])
async def test_the_head_promise_holds_with_one_and_three_nodes(
    gw: HeadGateway, chains: dict[str, Chain], network: str, block_time_s: float, nodes: int
) -> None:
    """The head by agreement at each network's shipped block time (BSC 0.45 s, opBNB
    0.25 s since Fourier), newHeads on: one node (it follows that node) and three
    (two must confirm a block before it is served): >= 95 % of answers at most 1
    block behind the node, none more than 2."""
    chain = chains[network]
    chain.block_time_s = block_time_s
    served = [await start_ws_node(chain) for _ in range(nodes)]
    other = "opbnb" if network == "bsc" else "bsc"
    idle = await start_ws_node(chains[other])
    await gw.start({}, {network: [n.url for n in served], other: [idle.url]})
    await eventually(lambda: all(n.subscriptions("newHeads") == 1 for n in served), 5.0)
    chain.start()
    lags = await _lags(gw, chain, 8.0, network)
    print(
        f"{network} {block_time_s}s {nodes} node(s): {len(lags)} answers, "
        f"lag histogram {dict(sorted(Counter(lags).items()))}"
    )
    _assert_head_promise(lags)
