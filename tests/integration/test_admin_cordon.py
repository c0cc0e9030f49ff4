"""Cordons through the admin API: two gateway processes (apps) sharing one Redis.

A cordoned node gets no new call from either app within 1 s of the answer
to the cordon call, while a call already on it finishes; the state lives
in Redis, so a new app on the same Redis starts with the node cordoned, and
``/readyz`` on the metrics listener and ``GET /admin/nodes`` say who
cordoned it and when. The time each app took to see the cordon is printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway import typedefs as T
from gateway.config import Config
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from tests.helpers.admin import AdminStack, Tokens, admin_tokens
from tests.helpers.config import MakeConfig
from tests.helpers.waiting import eventually

SLOW_MS = 400  # the in-flight call's node latency: time to cordon it, under the hedge delay (0.5 s)


@pytest.fixture
async def two_nodes() -> AsyncIterator[list[MockNode]]:
    # spare_probes: the slow latency below is for client calls; probes stay quick
    opts = MockNodeOptions(chain_id=56, block_time_s=0, spare_probes=True)
    nodes = [await start_mock_node(opts), await start_mock_node(opts)]
    yield nodes
    for node in nodes:
        await node.close()


@pytest.fixture
def tokens() -> Tokens:
    return admin_tokens()


@pytest.fixture
def cfg(make_config: MakeConfig, tokens: Tokens, two_nodes: list[MockNode]) -> Config:
    upstreams = [{"url": n.url, "name": f"node-{i}"} for i, n in enumerate(two_nodes)]
    return make_config({"admin": tokens.table(), "networks": {"bsc": {"upstreams": upstreams}}})


def _address() -> str:
    return "0x" + secrets.token_hex(20)  # a fresh address: never a cache hit


def _cordon_of(stack: AdminStack, name: str) -> object:
    node = next(n for n in stack.app[T.POOLS]["bsc"].nodes if n.name == name)
    return node.cordon


async def test_cordon_reaches_both_apps_within_a_second_and_in_flight_calls_finish(
    cfg: Config, tokens: Tokens, two_nodes: list[MockNode], api_key: str
) -> None:
    one, two = await AdminStack(cfg).start(), await AdminStack(cfg).start()
    try:
        for s in (one, two):
            await asyncio.wait_for(s.app[T.CORDONS].ready.wait(), 10)
        slow = two_nodes[0]
        slow.options = dataclasses.replace(slow.options, latency_ms=SLOW_MS)
        # a call in flight on node-0 from app one (round robin: try until one lands there)
        pool = one.app[T.POOLS]["bsc"]
        in_flight: asyncio.Task[tuple[int, str, object]] | None = None
        for _ in range(10):
            task = asyncio.create_task(one.rpc(api_key, "eth_getBalance", [_address(), "latest"]))

            def reached(task: asyncio.Task[tuple[int, str, object]] = task) -> bool:
                return sum(n.in_flight for n in pool.nodes) > 0 or task.done()

            await eventually(reached, 5, "the call to reach a node")
            if pool.nodes[0].in_flight:
                in_flight = task
                break
            await task
        assert in_flight is not None, "no call landed on node-0"

        started = time.monotonic()
        status, body = await two.call("POST", "/nodes/bsc/node-0/cordon", tokens.write)
        answered = time.monotonic()
        assert status == 200 and body["cordoned"]["by"] == "ops-write"
        seen: dict[str, float] = {}

        def both_see_it() -> bool:
            for label, s in (("one", one), ("two", two)):
                if label not in seen and _cordon_of(s, "node-0") is not None:
                    seen[label] = time.monotonic() - started
            return len(seen) == 2

        await eventually(both_see_it, 1.0, "both apps to see the cordon", interval_s=0.001)
        print(
            f"\ncordon seen: app two (answered the call) {seen['two'] * 1000:.1f} ms, "
            f"app one (pub/sub) {seen['one'] * 1000:.1f} ms after the request; "
            f"the call took {(answered - started) * 1000:.1f} ms"
        )

        before = slow.by_method["eth_getBalance"]
        for s in (one, two):
            for _ in range(6):
                status, node, _ = await s.rpc(api_key, "eth_getBalance", [_address(), "latest"])
                assert status == 200 and node == "node-1"
        assert slow.by_method["eth_getBalance"] == before  # no new call reached node-0

        status, node, answer = await in_flight  # the call already on node-0 finished there
        assert status == 200 and node == "node-0" and "result" in answer  # type: ignore[operator]

        status, body = await one.call("POST", "/nodes/bsc/node-0/uncordon", tokens.write)
        assert status == 200 and body["was_cordoned"] is True
        await eventually(lambda: _cordon_of(two, "node-0") is None, 1.0, "the uncordon")

        # how long the other app takes, over repeated cordons (pub/sub, then a re-read)
        delays: list[float] = []
        for _ in range(20):
            t0 = time.monotonic()
            status, _ = await one.call("POST", "/nodes/bsc/node-1/cordon", tokens.write)
            assert status == 200
            await eventually(
                lambda: _cordon_of(two, "node-1") is not None, 1.0, "the cordon", interval_s=0.0005
            )
            delays.append(time.monotonic() - t0)
            await one.call("POST", "/nodes/bsc/node-1/uncordon", tokens.write)
            await eventually(lambda: _cordon_of(two, "node-1") is None, 1.0, "the uncordon")
        delays.sort()
        print(
            f"cordon request -> the other app applies it, 20 runs: "
            f"median {delays[10] * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms"
        )
    finally:
        await one.close()
        await two.close()


async def test_cordon_survives_a_restart_and_shows_in_readyz(
    cfg: Config, tokens: Tokens, api_key: str
) -> None:
    first = await AdminStack(cfg).start()
    try:
        status, _ = await first.call("POST", "/nodes/bsc/node-1/cordon", tokens.write)
        assert status == 200
        status, _ = await first.call("POST", "/nodes/bsc/node-9/cordon", tokens.write)
        assert status == 404  # no such node: nothing stored
        status, _ = await first.call("POST", "/nodes/nope/node-1/cordon", tokens.write)
        assert status == 404
    finally:
        await first.close()

    again = await AdminStack(cfg).start()  # a new process on the same Redis
    try:
        status, body = await again.call("GET", "/nodes", tokens.read)
        nodes = {n["name"]: n for n in body["networks"][0]["nodes"]}
        assert nodes["node-1"]["state"] == "cordoned" and nodes["node-1"]["in_service"] is False
        assert nodes["node-1"]["cordoned"]["by"] == "ops-write"
        assert isinstance(nodes["node-1"]["cordoned"]["at"], int)
        assert nodes["node-0"]["state"] == "current"
        for _ in range(4):
            status, node, _ = await again.rpc(api_key, "eth_getBalance", [_address(), "latest"])
            assert status == 200 and node == "node-0"
        url = f"http://127.0.0.1:{again.listener.port}/readyz"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            ready = await resp.json()
        ups = {u["node"]: u for u in ready["networks"]["bsc"]["upstreams"]}
        assert ups["node-1"]["cordoned"]["by"] == "ops-write"
        assert ups["node-1"]["in_service"] is False and ups["node-0"]["cordoned"] is None
        status, _ = await again.call("POST", "/nodes/bsc/node-1/uncordon", tokens.write)
        assert status == 200
    finally:
        await again.close()
