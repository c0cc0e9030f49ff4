"""``bench mix``: node latency as mean +- spread, and verdict thresholds as flags."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from bench.__main__ import build_parser
from bench.scenarios.mix import node_latency
from bench.stack import child_env
from bench.units import spread_arg


def test_spread_reads_mean_and_spread() -> None:
    assert spread_arg("5ms+-3ms") == pytest.approx((0.005, 0.003))
    assert spread_arg("20+-10") == pytest.approx((0.020, 0.010))  # ms by default
    assert spread_arg("20ms ± 10ms") == pytest.approx((0.020, 0.010))
    assert spread_arg("7ms") == pytest.approx((0.007, 0.0))
    for bad in ("3ms+-5ms", "fast", "5ms+-x"):
        with pytest.raises(argparse.ArgumentTypeError):
            spread_arg(bad)


def test_mix_flags_default_to_the_issue_targets() -> None:
    args = build_parser().parse_args(["mix"])
    assert args.min_vs_proxy == 2.0 and args.max_node_calls == 0.05
    assert args.rounds == 2
    assert node_latency(args) == (0.0, 0.0)
    args = build_parser().parse_args(
        ["mix", "--node-delay", "20ms+-10ms", "--min-vs-proxy", "1.5", "--max-node-calls", "0.1"]
    )
    assert node_latency(args) == pytest.approx((10.0, 20.0))  # 10 ms + uniform 0..20 ms
    assert args.min_vs_proxy == 1.5 and args.max_node_calls == 0.1
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mix", "--max-node-calls", "0"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mix", "--rounds", "0"])


@pytest.mark.slow
def test_mix_runs_with_latency_and_judges_by_the_flags() -> None:
    """A short real run: the thresholds in the verdict are the flags' values."""
    out = subprocess.run(
        [sys.executable, "-m", "bench", "mix", "--duration", "1s", "--keys", "2",
         "--connections", "8", "--node-delay", "5ms+-3ms", "--min-vs-proxy", "0.01",
         "--max-node-calls", "50", "--door", "app", "--quiet", "--no-plot", "--out-dir", "",
         "--json"],
        capture_output=True, text=True, timeout=240, env=child_env(),
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["door"] == "app"  # --door reaches the gateway the stack starts
    checks = {c["name"]: c for c in report["verdict"]["checks"]}
    assert checks["node calls per client call <= 50"]["pass"]
    assert checks["throughput >= 0.01x the bare proxy"]["pass"]
    figures = report["figures"]
    assert figures["mock node latency"] == "2 ms + uniform 0..6 ms (mean 5 ms)"
    gw = report["targets"]["gateway"]
    assert gw["server_cpu_us_per_req"] > 0
    assert figures["gateway CPU per answered call"].endswith(" µs")
    assert report["targets"]["proxy"]["server_cpu_us_per_req"] > 0
    # A B A B by default, and Redis's time split by command over the gateway's phases
    assert gw["rounds"] == 2 and report["targets"]["proxy"]["rounds"] == 2
    assert figures["Redis evalsha per admitted call"].endswith(" calls)")
