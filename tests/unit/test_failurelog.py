"""FailureLog: one line per interval, and the next line says how many it left out."""

from __future__ import annotations

import time

import pytest

from gateway.redis.failurelog import FailureLog


def test_one_line_per_interval_counting_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    failed = FailureLog(0.05)
    with caplog.at_level("WARNING", logger="gateway.redis"):
        for i in range(5):
            failed(ConnectionError(f"refused {i}"))
        time.sleep(0.06)
        failed(ConnectionError("refused 5"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "refused 0" in lines[0] and "(0 similar" in lines[0]
    assert "refused 5" in lines[1] and "(4 similar" in lines[1]
