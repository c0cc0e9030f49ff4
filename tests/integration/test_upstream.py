"""NodePool against real mock nodes on free ports: routing, retries, health."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.config import DEFAULT_METHODS, NetworkConfig, UpstreamConfig
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import free_port
from gateway.telemetry.metrics import Metrics
from gateway.upstream.pool import NodePool, UpstreamError
from tests.helpers.waiting import eventually

# net_version: the probe asks eth_chainId itself, so counting those would count probes
CALL = b'{"jsonrpc":"2.0","id":1,"method":"net_version","params":[]}'
PROBE_ANSWER = (
    b'[{"jsonrpc":"2.0","id":1,"result":{"number":"0x10","hash":"0xaa"}},'
    b'{"jsonrpc":"2.0","id":"gateway-chain-check","result":"0x38"}]'
)
SEND = b'{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x01"]}'


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def nodes() -> AsyncIterator[list[MockNode]]:
    started = [
        await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0)) for _ in range(3)
    ]
    yield started
    for node in started:
        await node.close()


PoolFactory = Callable[..., Any]


@pytest.fixture(params=["lean", "aiohttp"])
async def make_pool(request: pytest.FixtureRequest) -> AsyncIterator[PoolFactory]:
    """Every pool test runs over both transports (upstream.client)."""
    pools: list[NodePool] = []
    transport = request.param

    async def make(
        urls: list[str],
        *,
        total_s: float = 2.0,
        connect_s: float = 0.5,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        **upstream: Any,
    ) -> NodePool:
        net = NetworkConfig(
            name="bsc",
            prefix="/bsc",
            chain_id=56,
            upstreams=tuple(urls),
            methods=frozenset(DEFAULT_METHODS),
        )
        cfg = dataclasses.replace(UpstreamConfig(), **{"client": transport, **upstream})
        pool = NodePool(net, cfg, connect_s, total_s, metrics=metrics, clock=clock)
        await pool.start()
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.close()


def _calls(node: MockNode, method: str = "net_version") -> int:
    return node.by_method[method]


async def test_round_robin_over_healthy_nodes(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    pool = await make_pool([n.url for n in nodes])
    for _ in range(30):
        assert b'"56"' in await pool.forward(CALL)
    assert [_calls(n) for n in nodes] == [10, 10, 10]


async def test_down_node_read_is_retried_elsewhere(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    metrics = Metrics()
    pool = await make_pool([n.url for n in nodes], metrics=metrics, fail_threshold=100)
    nodes[1].down = True
    for _ in range(30):
        assert b"result" in await pool.forward(CALL)
    assert _calls(nodes[0]) + _calls(nodes[2]) == 30
    retries = metrics.upstream_results.labels("bsc", "bsc-1", "retry")._value.get()
    errors = metrics.upstream_results.labels("bsc", "bsc-1", "error")._value.get()
    assert retries == errors == 10


async def test_failing_node_taken_out_then_probed_back(
    nodes: list[MockNode], make_pool: PoolFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.upstream")
    clock = Clock()
    key = "0123456789abcdef0123456789abcdef"  # a provider key in the path (the mock ignores it)
    urls = [f"{nodes[0].url}/v3/{key}", *(n.url for n in nodes[1:])]
    pool = await make_pool(urls, clock=clock, fail_threshold=2, cooldown_s=10.0)
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, error_rate=1.0)
    for _ in range(9):
        assert b"result" in await pool.forward(CALL)
    node0 = pool.nodes[0]
    assert not node0.usable(clock.now) and pool.healthy_count() == 2
    hits = nodes[0].requests
    for _ in range(20):
        await pool.forward(CALL)
    assert nodes[0].requests == hits  # out of rotation: no traffic
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0)
    await pool.probe_once()
    assert pool.healthy_count() == 2  # answered, but the cooldown is not over
    clock.now += 10.0
    await pool.probe_once()
    assert pool.healthy_count() == 3 and node0.usable(clock.now)
    for _ in range(9):
        await pool.forward(CALL)
    assert nodes[0].requests > hits
    assert f"upstream taken out network=bsc node=bsc-0 url={nodes[0].url}/v3/***" in caplog.text
    assert "error=UpstreamError: bsc-0: HTTP 500" in caplog.text
    back = f"upstream back in rotation network=bsc node=bsc-0 url={nodes[0].url}/v3/***"
    assert caplog.text.count(back) == 1  # once, when the cooldown ended
    assert key not in caplog.text  # URLs may hold a provider key


async def test_probe_marks_down_and_lagging(nodes: list[MockNode], make_pool: PoolFactory) -> None:
    metrics = Metrics()
    pool = await make_pool([n.url for n in nodes], metrics=metrics, max_lag_blocks=5)
    nodes[1].set_head_offset(-50)
    nodes[2].down = True
    await pool.probe_once()
    states = [(n.healthy, n.lagging) for n in pool.nodes]
    assert states == [(True, False), (True, True), (False, False)]
    for _ in range(10):
        await pool.forward(CALL)
    assert _calls(nodes[0]) == 10  # the fresh node takes everything
    nodes[0].down = True
    await pool.probe_once()
    await pool.forward(CALL)
    assert _calls(nodes[1]) == 1  # a lagging node beats no node
    healthy = metrics.upstream_healthy
    # bsc-1 is now the best head there is, so no longer lagging
    assert [healthy.labels("bsc", f"bsc-{i}")._value.get() for i in range(3)] == [0, 1, 0]
    assert metrics.upstream_head.labels("bsc", "bsc-1")._value.get() == nodes[1].head
    assert pool.summary() == {"nodes": 3, "healthy": 1, "fresh": 1}


async def test_no_node_in_service_fails_at_once_without_asking(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    pool = await make_pool([nodes[0].url])
    nodes[0].down = True
    await pool.probe_once()
    assert pool.healthy_count() == 0 and not pool.serving()
    nodes[0].down = False  # back, but no probe has seen it yet: nothing vouches for it
    asked = _calls(nodes[0])
    with pytest.raises(UpstreamError, match="no upstream node in service"):
        await pool.forward(CALL)
    assert _calls(nodes[0]) == asked
    await pool.probe_once()
    assert b"result" in await pool.forward(CALL)


@pytest.mark.slow
async def test_slow_node_times_out_then_fails_over(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    metrics = Metrics()
    pool = await make_pool(
        [n.url for n in nodes[:2]],
        metrics=metrics,
        total_s=2.0,
        attempt_timeout_s=0.2,
        fail_threshold=100,
    )
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=1500)
    started = time.monotonic()
    for _ in range(4):
        assert b"result" in await pool.forward(CALL)
    elapsed = time.monotonic() - started
    # Two of four calls hit the slow node first and moved on after its 0.2 s attempt
    # timeout; had any waited for its answer, that call alone would take 1.5 s.
    assert elapsed < 1.2, elapsed
    assert metrics.upstream_results.labels("bsc", "bsc-0", "timeout")._value.get() == 2


async def test_everything_slow_is_a_timeout(nodes: list[MockNode], make_pool: PoolFactory) -> None:
    pool = await make_pool([n.url for n in nodes[:2]], total_s=0.5, attempt_timeout_s=0.2)
    for node in nodes[:2]:
        node.options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=1000)
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        await pool.forward(CALL)
    assert info.value.timeout
    assert time.monotonic() - started < 0.55  # one deadline for all attempts


async def test_everything_down_is_unavailable(make_pool: PoolFactory) -> None:
    pool = await make_pool([f"http://127.0.0.1:{free_port()}" for _ in range(2)])
    with pytest.raises(UpstreamError) as info:
        await pool.forward(CALL)
    assert not info.value.timeout
    assert "127.0.0.1" not in str(info.value)


@pytest.mark.slow
async def test_send_raw_transaction_not_resent_after_timeout(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    pool = await make_pool([n.url for n in nodes[:2]], attempt_timeout_s=0.2)
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=500)
    pool._next = 0
    with pytest.raises(UpstreamError) as info:
        await pool.forward(SEND, idempotent=False)
    assert info.value.timeout
    await asyncio.sleep(0.4)  # the slow node still counts the call when it arrives
    sent = _calls(nodes[0], "eth_sendRawTransaction") + _calls(nodes[1], "eth_sendRawTransaction")
    assert sent == 1


async def test_send_raw_transaction_not_resent_after_node_error(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    pool = await make_pool([n.url for n in nodes[:2]])
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, error_rate=1.0)
    pool._next = 0
    with pytest.raises(UpstreamError):
        await pool.forward(SEND, idempotent=False)
    assert _calls(nodes[1], "eth_sendRawTransaction") == 0


async def test_send_raw_transaction_retried_when_never_delivered(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    pool = await make_pool([dead, nodes[0].url])
    pool._next = 0
    assert b"result" in await pool.forward(SEND, idempotent=False)
    assert _calls(nodes[0], "eth_sendRawTransaction") == 1


async def test_send_raw_transaction_retried_after_429(
    nodes: list[MockNode], make_pool: PoolFactory
) -> None:
    pool = await make_pool([n.url for n in nodes[:2]])
    nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, rate_429=1.0)
    pool._next = 0
    assert b"result" in await pool.forward(SEND, idempotent=False)
    assert _calls(nodes[1], "eth_sendRawTransaction") == 1


async def test_retry_budget_caps_extra_load(nodes: list[MockNode], make_pool: PoolFactory) -> None:
    """With every node failing, attempts stay near (1 + ratio) x calls after the
    initial allowance, however many attempts a call could make."""
    for node in nodes:
        node.options = MockNodeOptions(chain_id=56, block_time_s=0, error_rate=1.0)
    pool = await make_pool(
        [n.url for n in nodes], retry_budget=0.2, max_attempts=3, fail_threshold=10_000
    )
    calls = 200
    for _ in range(calls):
        with pytest.raises(UpstreamError):
            await pool.forward(CALL)
    attempts = sum(n.requests for n in nodes)
    assert attempts <= calls * 1.2 + 10  # 10: the bucket's starting tokens


async def test_4xx_about_the_request_is_relayed_without_penalty(
    make_pool: PoolFactory, aiohttp_server: Any
) -> None:
    from aiohttp import web

    async def bad_request(request: web.Request) -> web.Response:
        if (await request.read()).startswith(b"["):  # the health probe: a good node
            return web.Response(body=PROBE_ANSWER, content_type="application/json")
        return web.Response(
            status=400, body=b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid"}}'
        )

    app = web.Application()
    app.router.add_post("/", bad_request)
    server = await aiohttp_server(app)
    pool = await make_pool([str(server.make_url("/"))], fail_threshold=1)
    for _ in range(3):
        assert b"-32602" in await pool.forward(CALL)
    assert pool.healthy_count() == 1


async def test_probe_forever_survives_and_logs(
    nodes: list[MockNode], make_pool: PoolFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pool = await make_pool([nodes[0].url], probe_interval_s=0.01)
    task = asyncio.create_task(pool.probe_forever())
    nodes[0].down = True
    await eventually(lambda: pool.healthy_count() == 0, 2.0)
    nodes[0].down = False
    await eventually(lambda: pool.healthy_count() == 1, 2.0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert "upstream probe failed network=bsc node=bsc-0" in caplog.text
    assert "upstream in service network=bsc node=bsc-0" in caplog.text
