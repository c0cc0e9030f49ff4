"""``python -m bench soak`` for ~20 s: every traffic class runs and the report holds.

The 10-minute run is the real soak (bench/README.md); this checks that the
scenario works end to end (stack, keys, every refusal class answered with
its own error, WebSocket churn, hostile clients, sampling, slopes, plot)
and that nothing it sends yields a 500 or restarts a worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scenarios.soak import slope_per_min

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# refusal class -> the status the error table gives it
EXPECTED = {
    "unknown key": 401,
    "revoked key": 401,
    "tiny plan": 429,
    "GET": 405,
    "too large": 413,
    "text/plain": 415,
    "gzip lie": 400,
    "expect": 417,
    "malformed": 400,
    "parse error": 200,
    "invalid": 200,
    "unknown method": 200,
}


def test_slope_is_per_minute() -> None:
    assert slope_per_min([(0, 1.0), (30, 2.0), (60, 3.0)]) == pytest.approx(2.0)
    assert slope_per_min([(0, 5.0), (10, 5.0), (20, 5.0)]) == 0.0
    assert slope_per_min([(0, 1.0), (10, 2.0)]) is None


def test_soak_runs_every_class_and_reports(tmp_path: Path) -> None:
    argv = [
        *(sys.executable, "-m", "bench", "soak", "--duration", "20s", "--warmup", "5s"),
        *("--sample-every", "2s", "--keys", "100", "--rate", "60", "--ws-per-s", "4"),
        *("--no-pin", "--quiet", "--json", "--out-dir", str(tmp_path)),
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a slope over its bound
    report = json.loads(done.stdout)
    outcomes: dict[str, int] = report["outcomes"]
    for kind, status in EXPECTED.items():
        assert outcomes.get(f"{kind} {status}", 0) > 0, (kind, outcomes)
    assert outcomes.get("read 200", 0) > 500
    assert outcomes.get("ws closed", 0) + outcomes.get("ws dropped", 0) > 10
    assert not any(k.endswith((" 500", " 501")) for k in outcomes), outcomes
    checks = {c["name"]: c for c in report["verdict"]["checks"]}
    assert checks["no 500, no 5xx but 502/503/504, JSON-RPC bodies, ids kept"]["pass"], checks
    assert checks["no worker restarted"]["pass"], checks
    samples = report["samples"]
    assert len(samples) >= 8
    assert all(s["rss_mib_per_worker"] > 0 and s["fds"] > 0 for s in samples)
    assert samples[-1]["cache_entries"] > 0  # the reads filled the cache
    assert set(report["slopes_per_min"]) >= {"rss_mib_per_worker", "fds", "redis_used_mib"}
    assert list(tmp_path.glob("soak-*.png")) and list(tmp_path.glob("soak-*.md"))
