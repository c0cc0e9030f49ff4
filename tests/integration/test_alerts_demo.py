"""``gateway serve --demo`` sets up one alert rule and a receiver that prints what it
gets; the banner's own command line makes the rule fire, and the receiver prints the
signed alert."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gateway.redis.embedded import free_port
from tests.helpers.procs import stop
from tests.integration.test_demo_dapps import _start_demo

pytestmark = pytest.mark.slow


def _wait_for(log: str, pattern: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    with open(log, errors="replace") as fh:
        text = ""
        while True:
            text += fh.read()
            found = re.search(pattern, text)
            if found:
                return found.group(0)
            assert proc.poll() is None, text
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{text}"
            time.sleep(0.1)


def test_the_banners_alert_line_fires_the_demo_rule(tmp_path: os.PathLike[str]) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the banner's line runs curl, which is not installed")
    log = os.path.join(tmp_path, "demo.log")
    proc = _start_demo(free_port(), Path(log))
    try:
        key = _wait_for(log, r"Demo API key: \S+", proc, 60).split()[-1]
        line = _wait_for(log, r"  curl -sZ .*uniq -c", proc, 30).strip()
        assert key not in line and "$RPC_KEY" in line
        codes = subprocess.run(
            ["bash", "-c", line],
            env={**os.environ, "RPC_KEY": key},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert re.search(r"\d+ 429", codes), codes
        alert = _wait_for(log, r"demo webhook: alert received, signature ok: .*", proc, 15)
        assert '"rule":"rate_limited"' in alert and '"threshold":5' in alert
    finally:
        stop(proc)
