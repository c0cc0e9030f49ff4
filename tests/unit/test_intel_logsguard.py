"""eth_getLogs range guard: to - from + 1 against the plan's limit, tags resolved."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import config_from_dict
from gateway.intel.head import HeadReport, HeadTracker
from gateway.intel.logsguard import check_logs_range, logs_range

H32 = "0x" + "cd" * 32


@pytest.fixture
def heads() -> HeadTracker:
    t = HeadTracker(["n"])
    t.observe("n", HeadReport(50_000, "0xh", safe=49_990, finalized=49_980))
    return t


@pytest.mark.parametrize(
    ("spec", "span"),
    [
        ({"fromBlock": "0x1", "toBlock": "0x10"}, 16),
        ({"fromBlock": "0x10", "toBlock": "0x10"}, 1),
        ({"fromBlock": "earliest", "toBlock": hex(9_999)}, 10_000),
        ({"fromBlock": hex(40_001)}, 10_000),  # toBlock defaults to latest
        ({}, 1),  # latest..latest
        ({"fromBlock": "earliest", "toBlock": "latest"}, 50_001),
        ({"fromBlock": "earliest", "toBlock": "pending"}, 50_001),
        ({"fromBlock": "earliest", "toBlock": "finalized"}, 49_981),
        ({"fromBlock": "safe"}, 11),
        ({"fromBlock": "0x20", "toBlock": "0x10"}, -15),  # inverted: the node's business
    ],
)
def test_range(heads: HeadTracker, spec: dict[str, Any], span: int) -> None:
    assert logs_range([spec], heads) == span


@pytest.mark.parametrize(
    "params",
    [
        [{"blockHash": H32}],
        [],
        "x",
        [1],
        [{"fromBlock": "0xzz"}],
        [{"toBlock": {"blockHash": H32}}],
    ],
)
def test_unmeasurable_ranges_pass(heads: HeadTracker, params: Any) -> None:
    assert logs_range(params, heads) is None
    assert check_logs_range(params, heads, 1) is None


def test_over_the_limit_gives_error_data_with_the_limit(heads: HeadTracker) -> None:
    params = [{"fromBlock": "earliest", "toBlock": hex(10_000)}]  # 10,001 blocks
    data = check_logs_range(params, heads, 10_000)
    assert data is not None
    assert data["max_logs_range"] == 10_000 and data["requested_range"] == 10_001
    assert "10000" in data["reason"]
    assert (
        check_logs_range([{"fromBlock": "earliest", "toBlock": hex(9_999)}], heads, 10_000) is None
    )
    assert check_logs_range(params, heads, 0) is None  # 0 = no limit


def test_latest_needs_a_known_head() -> None:
    t = HeadTracker(["n"])
    assert logs_range([{"fromBlock": "earliest"}], t) is None
    assert logs_range([{"fromBlock": "0x0", "toBlock": "0x5"}], t) == 6


def test_limit_comes_from_the_plan_or_the_default() -> None:
    cfg = config_from_dict(
        {"limits": {"max_logs_range": 5_000}, "plans": {"payg": {"max_logs_range": 50_000}}}
    )
    assert cfg.max_logs_range("free") == 5_000 and cfg.max_logs_range("payg") == 50_000
    assert cfg.max_logs_range("unknown") == 5_000
    assert config_from_dict({}).max_logs_range("free") == 10_000
