"""Worker processes get the whole config: every section survives config_to_raw."""

from __future__ import annotations

from gateway.config import config_from_dict
from gateway.server.workers import config_to_raw


def test_every_section_reaches_the_workers() -> None:
    cfg = config_from_dict(
        {
            "cache": {"enabled": False, "coalesce": False, "max_bytes": 1 << 20},
            "hedge": {"enabled": False, "floor_s": 0.01, "ceiling_s": 0.2},
            "networks": {"bsc": {"upstreams": ["http://127.0.0.1:9"]}},
        },
        {},
    )
    again = config_from_dict(config_to_raw(cfg), {})
    assert again.cache == cfg.cache and not again.cache.enabled
    assert again.hedge == cfg.hedge and not again.hedge.enabled
    assert again.insight == cfg.insight
    assert again == cfg
