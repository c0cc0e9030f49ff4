"""tune_gc: a serving process freezes its start-up objects and collects less often.

Run in a fresh interpreter: the collector's settings are process-wide.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = (
    "import gc, sys\n"
    "from gateway.server.listener import tune_gc\n"
    "tune_gc(int(sys.argv[1]))\n"
    "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)\n"
)


@pytest.mark.parametrize(("threshold", "expected"), [(50_000, "50000 True"), (0, "700 False")])
def test_threshold_and_freeze(threshold: int, expected: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(threshold)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert out == expected
