"""The load generator: open-loop timing, latency from the intended send time,
failure accounting, and the multi-process merge."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from bench.client import build_request
from bench.hist import LatencyHistogram
from bench.loadgen import LoadSpec, WorkerStats, intended_times, run_load
from bench.loadworker import _Worker
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node

BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'


@pytest.fixture
async def node() -> AsyncIterator[MockNode]:
    n = await start_mock_node(MockNodeOptions(block_time_s=0))
    yield n
    await n.close()


def spec_for(node: MockNode, **kw: object) -> LoadSpec:
    req = build_request("127.0.0.1", node.port, "/bsc/k", BODY)
    args: dict[str, object] = {
        "host": "127.0.0.1",
        "port": node.port,
        "requests": (req,),
        "duration_s": 0.5,
        "drain_s": 2.0,
    }
    args.update(kw)
    return LoadSpec(**args)  # type: ignore[arg-type]


async def run_worker(spec: LoadSpec, connections: int) -> tuple[WorkerStats, _Worker]:
    worker = _Worker(spec, 0, connections)
    await worker.connect_all()
    stats = await worker.run(time.monotonic() + 0.01, lambda st: None)
    return stats, worker


def hist(stats: WorkerStats, kind: str = "ok") -> LatencyHistogram:
    return LatencyHistogram.decode(stats.hists[kind])


def test_intended_times_interleave_across_processes() -> None:
    procs = 3
    union = sorted(t for k in range(procs) for t in intended_times(10.0, 200.0, k, procs, 11.0))
    assert len(union) == 200
    assert union == pytest.approx([10.0 + i / 200.0 for i in range(200)])


@pytest.mark.slow
async def test_open_loop_sends_on_schedule(node: MockNode) -> None:
    stats, worker = await run_worker(spec_for(node, rate=200.0), 4)
    assert stats.sent == 100 and stats.kinds["ok"] == 100
    assert node.requests == 100
    assert worker.lag.percentile_ms(50) < 5.0  # dispatcher kept up


@pytest.mark.slow
async def test_latency_counts_queueing_behind_a_slow_server(node: MockNode) -> None:
    """No coordinated omission: with one connection and a 50 ms server, requests
    due every 25 ms queue up, and their latency grows from the intended time."""
    node.options = MockNodeOptions(latency_ms=50, block_time_s=0)
    stats, _ = await run_worker(spec_for(node, rate=40.0, duration_s=0.5), 1)
    h = hist(stats)
    assert h.count == 20
    assert h.min_ms() == pytest.approx(50, abs=15)
    # request i completes near (i+1)*50 ms but was due at i*25 ms
    assert h.max_ms() > 400
    assert h.percentile_ms(50) > 200


async def test_closed_loop_measures_service_time(node: MockNode) -> None:
    node.options = MockNodeOptions(latency_ms=20, block_time_s=0)
    stats, _ = await run_worker(spec_for(node, rate=0.0, duration_s=0.3), 2)
    h = hist(stats)
    assert 20 <= h.count <= 32  # 2 connections x ~15 round trips
    assert h.percentile_ms(99) < 60
    assert h.min_ms() >= 19


@pytest.mark.slow
async def test_timeouts_and_unsent_requests_are_counted(node: MockNode) -> None:
    node.options = MockNodeOptions(latency_ms=400, block_time_s=0)
    spec = spec_for(node, rate=100.0, duration_s=0.3, timeout_s=0.1, drain_s=0.2)
    stats, _ = await run_worker(spec, 1)
    assert stats.kinds["timeout"] >= 1
    assert sum(stats.kinds.values()) == 30  # every intended request is accounted for
    assert "ok" not in stats.kinds


@pytest.mark.slow
async def test_connection_errors_when_the_server_goes_down(node: MockNode) -> None:
    node.options = MockNodeOptions(latency_ms=100, block_time_s=0)
    spec = spec_for(node, rate=50.0, duration_s=0.4)
    worker = _Worker(spec, 0, 2)
    await worker.connect_all()
    node.down = True
    stats = await worker.run(time.monotonic() + 0.01, lambda st: None)
    assert stats.kinds["conn_error"] >= 1
    assert "ok" not in stats.kinds


@pytest.mark.slow
async def test_server_errors_by_kind_and_retry_after(node: MockNode) -> None:
    node.options = MockNodeOptions(rate_429=0.5, error_rate=0.2, seed=3, block_time_s=0)
    stats, _ = await run_worker(spec_for(node, rate=400.0), 4)
    assert stats.kinds["http_429"] > 0 and stats.kinds["http_500"] > 0
    assert stats.retry_after == stats.kinds["http_429"]
    assert sum(stats.kinds.values()) == 200


@pytest.mark.slow
async def test_processes_merge(node: MockNode) -> None:
    """Two real worker processes: counts add up and histograms merge."""
    spec = spec_for(node, rate=300.0, duration_s=0.5, processes=2, connections=4)
    res = await run_load(spec, progress=False)
    assert res.sent == 150 and res.kinds["ok"] == 150
    assert res.latency(("ok",)).count == 150
    assert len(res.cpu_s) == 2
    assert sum(res.timeline.values()) == 150
    assert sum(h.count for h in res.second_hists.values()) == 150
