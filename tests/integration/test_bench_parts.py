"""A real, short ``python -m bench steady`` run names every part's CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.stack import child_env


@pytest.mark.slow
def test_steady_report_lists_cpu_of_each_part(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "steady", "--closed", "--duration", "1s",
         "--connections", "8", "--workers", "2", "--json", "--quiet", "--no-plot",
         "--out-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    gw = json.loads(out.stdout)["targets"]["gateway"]
    parts = {row["part"]: row for row in gw["cpu_by_part"]}
    expected = {"gateway supervisor", "gateway worker 1", "gateway worker 2", "redis-server"}
    assert expected <= set(parts)
    assert {"mocknode-56-0", "mocknode-56-1", "mocknode-204-0", "load generator 1"} <= set(parts)
    for name in ("gateway worker 1", "gateway worker 2", "redis-server", "load generator 1"):
        assert parts[name]["cpu_s"] > 0 and parts[name]["us_per_req"] > 0, parts[name]
    assert gw["admitted"] == gw["kinds"]["ok"] > 0
    assert gw["redis_cpu_us_per_admitted"] > 0
    assert gw["at_limit"]


@pytest.mark.slow
def test_scale_runs_one_then_two_workers(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "scale", "--max-workers", "2", "--duration", "1s",
         "--connections", "8", "--min-efficiency", "0", "--max-cpu-growth", "1", "--json",
         "--quiet", "--out-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=180, env=child_env(),
    )  # fmt: skip
    # 1: a verdict failed (CPU per request is measured on a shared machine); 2+: it broke
    assert out.returncode in (0, 1), out.stderr[-2000:]
    report = json.loads(out.stdout)
    errors = next(c for c in report["verdict"]["checks"] if c["name"] == "error rate")
    assert errors["pass"], errors
    rows = report["scale"]["rows"]
    assert [r["workers"] for r in rows] == [1, 2]
    assert rows[1]["ideal_rps"] == pytest.approx(2 * rows[0]["throughput_rps"])
    two = {r["part"] for r in report["targets"]["2 workers"]["cpu_by_part"]}
    assert {"gateway worker 1", "gateway worker 2"} <= two  # really restarted with 2
    assert report["targets"]["2 workers"]["connections"] == 16  # same per worker
    assert list(tmp_path.glob("scale-*.png"))
    assert all(r["gateway_cpu_us_per_req"] > 0 for r in rows)
    checks = {c["name"]: c for c in report["verdict"]["checks"]}
    growth = checks["gateway CPU per request within 100% of 1 worker's"]
    assert growth["detail"].startswith("2 workers: ")  # CPU per request, judged against 1's


@pytest.mark.slow
def test_gateway_wrap_runs_the_server_under_a_command(tmp_path: Path) -> None:
    """``--gateway-wrap`` (valgrind, perf, ...) wraps the server only, and the run works."""
    mark = tmp_path / "wrapped"
    wrap = f"sh -c 'echo $$ >> {mark}; exec \"$@\"' wrap"
    out = subprocess.run(
        [sys.executable, "-m", "bench", "steady", "--closed", "--duration", "1s",
         "--connections", "4", "--gateway-wrap", wrap, "--json", "--quiet", "--no-plot",
         "--out-dir", ""],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["targets"]["gateway"]["kinds"]["ok"] > 0
    assert len(mark.read_text().split()) == 1  # the server, not the operator CLI calls
