"""Fault injection, upstream side: a node killed under load, a node gone slow.

The gateway is served by ``GatewayRunner`` on a free port; the load is a
few keep-alive clients calling an idempotent read as fast as they can. Each
test prints one ``FAULT`` line with its numbers (``pytest -s`` shows them).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from gateway import typedefs as T
from gateway.config import Config
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS, Metrics
from gateway.upstream.pool import NodePool
from tests.helpers.config import MakeConfig
from tests.helpers.served import served

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}
CLIENTS = 16


@dataclass
class LoadResult:
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    bad_bodies: int = 0

    @property
    def total(self) -> int:
        return sum(self.statuses.values()) + sum(self.errors.values())

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def run_load(
    url: str, duration_s: float, fault: Callable[[], Awaitable[None]], clients: int = CLIENTS
) -> LoadResult:
    """``clients`` keep-alive loops posting CALL for ``duration_s`` while ``fault`` runs."""
    result = LoadResult()
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + duration_s
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

        async def client() -> None:
            while loop.time() < stop_at:
                started = time.perf_counter()
                try:
                    async with session.post(url, data=CALL, headers=JSON) as resp:
                        body = await resp.read()
                        result.statuses[resp.status] += 1
                        if resp.status == 200 and b'"result"' not in body:
                            result.bad_bodies += 1
                except aiohttp.ClientError as exc:
                    result.errors[type(exc).__name__] += 1
                result.latencies.append(time.perf_counter() - started)

        await asyncio.gather(fault(), *(client() for _ in range(clients)))
    return result


def _result(metrics: Metrics, node: str, result: str) -> float:
    value: float = metrics.upstream_results.labels("bsc", node, result)._value.get()
    return value


def _node_process() -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.mocknode",
            "--chain-id",
            "56",
            "--port",
            "0",
            "--block-time",
            "0",
            "--latency",
            "2ms",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    assert url.startswith("http://"), url
    return proc, url


@pytest.fixture
def node_processes() -> Iterator[list[tuple[subprocess.Popen[bytes], str]]]:
    procs = [_node_process() for _ in range(3)]
    yield procs
    for proc, _ in procs:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def _fault_cfg(make_config: MakeConfig, urls: list[str], **upstream: Any) -> Config:
    cfg: Config = make_config(
        {
            "server": {"access_log": False},
            "cache": {
                "enabled": False,
                "coalesce": False,
            },  # every call must reach a node: failover is the test
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            "limits": {"upstream_timeout_s": 2.0, "upstream_connect_timeout_s": 0.3},
            "upstream": {
                "probe_interval_s": 0.2,
                "probe_timeout_s": 0.3,
                "fail_threshold": 3,
                "cooldown_s": 5.0,
                "attempt_timeout_s": 0.5,
                **upstream,
            },
        },
        upstreams={"bsc": urls},
    )
    return cfg


@pytest.mark.slow
async def test_node_killed_under_load_no_client_errors(
    make_config: MakeConfig, api_key: str, node_processes: list[tuple[subprocess.Popen[bytes], str]]
) -> None:
    cfg = _fault_cfg(make_config, [url for _, url in node_processes])
    victim = node_processes[1][0]
    async with served(cfg) as srv:
        killed_at: list[float] = []

        async def kill() -> None:
            await asyncio.sleep(0.7)
            os.kill(victim.pid, signal.SIGKILL)
            killed_at.append(time.monotonic())

        result = await run_load(f"{srv.url}/bsc/{api_key}", 2.0, kill)
        pool = srv.app[T.POOLS]["bsc"]
        metrics = srv.app[METRICS]
        out_after = pool.nodes[1].down_until > 0 or not pool.nodes[1].healthy
        retries = _result(metrics, "bsc-1", "retry")
        failed = _result(metrics, "bsc-1", "error") + _result(metrics, "bsc-1", "timeout")
    print(
        f"\nFAULT node-killed: requests={result.total} ok={result.statuses[200]} "
        f"client_errors={result.total - result.statuses[200]} retries={retries:.0f} "
        f"failed_attempts_on_killed={failed:.0f} p50_ms={result.quantile(0.5) * 1e3:.1f} "
        f"p99_ms={result.quantile(0.99) * 1e3:.1f} max_ms={max(result.latencies) * 1e3:.1f}"
    )
    assert result.statuses == {200: result.total}, (result.statuses, result.errors)
    assert result.bad_bodies == 0
    assert out_after  # the dead node left the rotation
    assert retries >= 1


@pytest.mark.slow
async def test_slow_node_times_out_then_fails_over(make_config: MakeConfig, api_key: str) -> None:
    nodes: list[MockNode] = [
        await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0)) for _ in range(2)
    ]
    try:
        # A budget that cannot run dry: this test is about timing out and failing
        # over; on a loaded machine hedges of ordinary calls (over the 50 ms floor)
        # spent the shared 20 % budget and a few calls got 504 (test_intel_app
        # covers the budget itself).
        # Attempts of 1 s (the slow node takes 5 s, so it still times out): the
        # healthy node answers in milliseconds, yet on a loaded 2-core box this
        # one event loop (gateway, nodes and clients) stalled for 378 ms once and
        # 734 ms another time; with 0.25 s and then 0.5 s attempts that timed the
        # healthy node's attempt out as well and a few calls got 504 (a stall of
        # the test's own process, not failover).
        cfg = _fault_cfg(
            make_config, [n.url for n in nodes], retry_budget=1.0, attempt_timeout_s=1.0
        )
        attempt_s = cfg.upstream.attempt_timeout_s
        async with served(cfg) as srv:

            async def slow_down() -> None:
                await asyncio.sleep(0.5)
                nodes[0].options = MockNodeOptions(chain_id=56, block_time_s=0, latency_ms=5000)

            result = await run_load(f"{srv.url}/bsc/{api_key}", 2.0, slow_down)
            metrics = srv.app[METRICS]
            timeouts = _result(metrics, "bsc-0", "timeout")
            # A read in flight on the slow node is hedged on the other one after
            # the slow node's p95 (a cancelled loser is no timeout), or times out.
            hedges_won = srv.app[T.POOLS]["bsc"].intel.hedge_stats.hedges_won
            node0 = srv.app[T.POOLS]["bsc"].nodes[0]
            out = not node0.usable(time.monotonic())
    finally:
        for node in nodes:
            await node.close()
    slow = [x for x in result.latencies if x > 0.2]
    print(
        f"\nFAULT slow-node: requests={result.total} ok={result.statuses[200]} "
        f"client_errors={result.total - result.statuses[200]} timeouts_on_slow={timeouts:.0f} "
        f"hedges_won={hedges_won} "
        f"calls_over_200ms={len(slow)} p50_ms={result.quantile(0.5) * 1e3:.1f} "
        f"p99_ms={result.quantile(0.99) * 1e3:.1f} max_ms={max(result.latencies) * 1e3:.1f}"
    )
    # No call fails: a hedge that failed and a first attempt that then timed out
    # used to leave no untried node (a few 504s in CI); the retry now goes to
    # a node whose attempt has ended (test_a_failed_hedge_then_a_timeout_...).
    assert result.statuses == {200: result.total}, (result.statuses, result.errors)
    assert timeouts + hedges_won >= 1 and out
    assert max(result.latencies) < attempt_s + 0.5  # one attempt timeout, then the other node
    assert len(slow) <= CLIENTS * 2  # only calls in flight before the node left rotation


async def test_all_nodes_down_is_502_then_recovers(
    make_config: MakeConfig, api_key: str, store: Store
) -> None:
    node = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
    try:
        cfg = _fault_cfg(make_config, [node.url], cooldown_s=0.3)
        async with served(cfg) as srv, aiohttp.ClientSession() as session:
            url = f"{srv.url}/bsc/{api_key}"
            node.down = True
            async with session.post(url, data=CALL, headers=JSON) as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["message"] == "Upstream unavailable"
            node.down = False
            started = time.monotonic()
            async with asyncio.timeout(3):
                while True:
                    async with session.post(url, data=CALL, headers=JSON) as resp:
                        if resp.status == 200:
                            break
                    await asyncio.sleep(0.02)
            print(f"\nFAULT all-down: recovered_after_ms={(time.monotonic() - started) * 1e3:.0f}")
    finally:
        await node.close()


async def test_a_failed_hedge_then_a_timeout_still_retries_within_the_deadline(
    make_config: MakeConfig,
) -> None:
    """The path behind the slow-node test's rare 504s, made deterministic.

    The first attempt goes to the slow node; after the hedge delay the hedge
    goes to the other node, which fails at once (HTTP 500, then never again:
    seed 1 draws 0.13, 0.85, ...); then the first attempt times out. Both
    nodes had been tried, so no "different node" was left and the call ended
    in 504 with 1.7 s of its 2 s deadline unused. A retry may go again to a
    node whose attempt of this call has ended and did not end it last.
    """
    slow = await start_mock_node(
        MockNodeOptions(block_time_s=0, latency_ms=5000, spare_probes=True)
    )
    flaky = await start_mock_node(
        MockNodeOptions(block_time_s=0, error_rate=0.5, seed=1, spare_probes=True)
    )
    try:
        cfg = _fault_cfg(make_config, [slow.url, flaky.url], attempt_timeout_s=0.25)
        cfg = dataclasses.replace(
            cfg, hedge=dataclasses.replace(cfg.hedge, floor_s=0.02, ceiling_s=0.05)
        )
        net = cfg.networks[0]
        pool = NodePool(net, cfg.upstream, 0.3, 2.0, config=cfg)
        async with pool:
            started = time.monotonic()
            answer = await pool.forward(CALL, hedge=True)
            took = time.monotonic() - started
        assert isinstance(answer, bytes) and b'"result":"0x38"' in answer
        # the hedge that failed, then the retry (the spared health probes are not counted)
        assert flaky.by_method["eth_chainId"] == 2
        assert took < 0.25 + 0.2  # one attempt timeout, then the retry's answer
    finally:
        await slow.close()
        await flaky.close()
