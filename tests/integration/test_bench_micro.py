"""The micro-benchmarks run for real (briefly) and print their table and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.micro.common import Row, emit
from bench.stack import child_env


def test_row_figures_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [Row("a", 2000, 2.0, 0.05, {"Redis CPU µs/call": 4.0}), Row("b", 0, 1.0, 0.0, {})]
    assert rows[0].rps == 1000.0 and rows[0].cpu_us_per_call == pytest.approx(25.0)
    assert rows[1].cpu_us_per_call is None
    emit("t", "s", rows, as_json=False, params={}, machine={})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "t: s"
    assert out[2].split() == ["a", "1,000", "25.0", "4.0"]
    assert out[3].split() == ["b", "0", "nan", "nan"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "names"),
    [
        (
            "bench.micro.nodeclient",
            ["gateway NodeClient (lean)", "bench generator client (lean)", "aiohttp ClientSession"],
        ),
        ("bench.micro.redismux", ["redis.asyncio Redis.evalsha", "gateway MuxRedis.evalsha"]),
        ("bench.clientcost", ["gateway NodeClient (lean)"]),  # the old name still works
        (
            "bench.micro.admission",
            [
                "LeaseLimiter.admit, leased, no allowlists",
                "UsageSink.admitted, 1 method",
                "LeaseLimiter.admit, leased, no allowlists [HEAD]",
            ],
        ),
        (
            "bench.micro.watchdog",
            ["web.AppRunner, 16 conns", "GatewayRunner (watchdog, cap), 16 conns"],
        ),
        (
            "bench.micro.serving",
            [
                "app, 16 conns",
                "lowlevel, 16 conns",
                "gateway, 16 conns",
                "lean, 16 conns",
                "raw, 16 conns",
            ],
        ),
    ],
)
def test_micro_benchmark_runs(module: str, names: list[str]) -> None:
    extra = ["--connections", "16"] if module.endswith(("watchdog", "serving")) else []
    if module.endswith("serving"):
        extra += ["--rounds", "1"]
    if module.endswith("admission"):  # also the same pieces as of a git revision, interleaved
        extra = ["--baseline", "HEAD"]
    out = subprocess.run(
        [sys.executable, "-m", module, "--seconds", "0.3", "--json", *extra],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    rows = {r["name"]: r for r in report["rows"]}
    assert set(names) <= set(rows)
    for name in names:
        assert rows[name]["calls"] > 0 and rows[name]["cpu_us_per_call"] > 0
    if module.endswith("redismux"):
        assert all(r["extra"]["Redis CPU µs/call"] > 0 for r in rows.values())


@pytest.mark.slow
@pytest.mark.parametrize("tracing", [[], ["--tracing"]], ids=["off", "traced"])
def test_pipeline_cache_hits_cost_no_node_call(tracing: list[str]) -> None:
    """The pipeline's own CPU per call: a real app, Redis and node; every measured call a hit
    (traced: with every call's spans sent to an OTLP sink in another process)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.micro.pipeline", "--seconds", "0.3", "--repeats", "1",
         "--json", *tracing],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["params"]["tracing"] == (1.0 if tracing else None)
    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows) == {f"pipeline, cache hit: {n}" for n in ("block", "balance", "batch of 3")}
    for row in rows.values():
        assert row["calls"] > 0 and row["cpu_us_per_call"] > 0
        assert row["extra"]["node calls"] == 0, row  # answered by the cache, not the node


@pytest.mark.slow
def test_admission_modes_against_real_redis() -> None:
    """``--redis``: exact and leased admission of a real key; only exact costs Redis per call."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.micro.admission", "--seconds", "0.5", "--repeats", "1",
         "--redis", "--concurrency", "8", "--json"],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(out.stdout)["rows"]}
    exact = rows["exact: ExactLimiter (admit.lua per call)"]
    leased = rows["leased: LeaseLimiter"]
    assert exact["calls"] > 0 and leased["calls"] > 0
    assert exact["extra"]["Redis CPU µs/call"] > 0
    # a lease serves most calls without Redis: far less Redis CPU per call than exact
    assert leased["extra"]["Redis CPU µs/call"] < exact["extra"]["Redis CPU µs/call"] / 2


@pytest.mark.slow
def test_one_call_followed_from_the_door_seldom_climbs_back_into_rpc() -> None:
    """One HTTP call through the shipped door, counted from ``RpcHttp.serve``: a cache hit
    never calls back up into ``rpc`` from a package below it, a miss once (``intel``'s
    coalescer running the read's node call as a task); at most 4 is the bar."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.micro.callpath", "--requests", "3", "--json"],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["shape"]: r for r in json.loads(out.stdout)["rows"]}
    hit, miss = rows["cache hit"], rows["cache miss"]
    assert hit["climbs_into_rpc"] == 0 and miss["climbs_into_rpc"] <= 1, (hit, miss)
    # the count followed the real path: the door came down into rpc, the hit was answered
    # from intel's cache without a node, the miss went down to the node's pool
    assert hit["edges"]["server -> rpc"] >= 1 and hit["edges"]["rpc -> intel"] >= 1
    assert "rpc -> upstream" not in hit["edges"] and miss["edges"]["rpc -> upstream"] >= 1
    assert 0 < hit["gateway_calls"] < miss["gateway_calls"]
