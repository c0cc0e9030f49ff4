"""NetworkIntel.from_config builds the parts the config asks for; head moves expire entries."""

from __future__ import annotations

from gateway.config import config_from_dict
from gateway.intel.head import HeadReport
from gateway.intel.network import NetworkIntel
from gateway.intel.policy import HEAD


def test_from_config_defaults() -> None:
    intel = NetworkIntel.from_config(config_from_dict({}), "bsc", ["bsc-0", "bsc-1"])
    assert intel.cache is not None and intel.cache.max_bytes == 64 * 1024 * 1024
    assert intel.coalescer is not None and intel.shared is None and intel.hedging
    assert intel.latency.delay("bsc-0") == 0.5 and intel.budget.ratio == 0.2


def test_everything_off() -> None:
    cfg = config_from_dict(
        {"cache": {"enabled": False, "coalesce": False}, "hedge": {"enabled": False}}
    )
    intel = NetworkIntel.from_config(cfg, "bsc", ["bsc-0"], redis=object())
    assert intel.cache is None and intel.coalescer is None and intel.shared is None
    assert not intel.hedging


def test_a_head_move_expires_head_entries() -> None:
    intel = NetworkIntel.from_config(config_from_dict({}), "bsc", ["bsc-0"])
    assert intel.observe_head("bsc-0", HeadReport(10, "0xa"))
    assert intel.cache is not None
    intel.cache.put(b"k", HEAD, intel.heads.head, b'"0xa"')
    assert not intel.observe_head("bsc-0", HeadReport(10, "0xa"))
    assert len(intel.cache) == 1
    assert intel.observe_head("bsc-0", HeadReport(10, "0xb"))  # reorg at the tip
    assert len(intel.cache) == 0
