"""The [cache], [hedge] sections and limits.max_logs_range: defaults and validation."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, config_from_dict


def test_defaults() -> None:
    cfg = config_from_dict({})
    assert cfg.cache.enabled and cfg.cache.coalesce and not cfg.cache.redis
    assert cfg.cache.max_bytes == 64 * 1024 * 1024
    assert (cfg.hedge.floor_s, cfg.hedge.ceiling_s, cfg.hedge.percentile) == (0.05, 0.5, 0.95)
    assert cfg.limits.max_logs_range == 10_000


def test_overrides() -> None:
    cfg = config_from_dict(
        {"cache": {"max_bytes": 1000, "max_entry_bytes": 100}, "hedge": {"floor_s": 0.01}}
    )
    assert cfg.cache.max_bytes == 1000 and cfg.hedge.floor_s == 0.01


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"cache": {"max_bytes": 10, "max_entry_bytes": 100}}, "cache.max_entry_bytes"),
        ({"cache": {"redis_max_bytes": 10}}, "cache.redis_max_entry_bytes"),
        ({"cache": {"redis": True, "redis_ttl_s": 0}}, "cache.redis_ttl_s"),
        ({"cache": {"max_bytes": -1}}, "cache.max_bytes"),
        ({"cache": {"size": 1}}, "cache.size"),
        ({"hedge": {"floor_s": 2.0, "ceiling_s": 1.0}}, "hedge.ceiling_s"),
        ({"hedge": {"percentile": 0}}, "hedge.percentile"),
        ({"hedge": {"window": 0}}, "hedge.window"),
        ({"hedge": {"enabled": "yes"}}, "hedge.enabled"),
        ({"limits": {"max_logs_range": -5}}, "limits.max_logs_range"),
        ({"plans": {"free": {"max_logs_range": -1}}}, "plans.free.max_logs_range"),
        ({"plans": {"free": {"max_logs_range": 1.5}}}, "plans.free.max_logs_range"),
    ],
)
def test_bad_values_name_their_path(raw: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        config_from_dict(raw)


def test_head_rules_and_block_times_load_and_are_checked() -> None:
    cfg = config_from_dict({})
    assert (cfg.network("bsc").block_time_s, cfg.network("opbnb").block_time_s) == (0.45, 0.25)
    head = cfg.head
    assert (head.quorum, head.solo_lead, head.clock_skew_s, head.max_mismatches) == (0, 1, 2, 3)
    cfg = config_from_dict({"head": {"solo_lead": 3}, "networks": {"bsc": {"block_time_s": 3}}})
    assert cfg.head.solo_lead == 3 and cfg.network("bsc").block_time_s == 3.0
    assert cfg.head.stale_s == 0 and cfg.network("opbnb").block_time_s == 0.25  # others kept
    for raw, path in (
        ({"networks": {"bsc": {"block_time_s": -1}}}, "networks.bsc.block_time_s"),
        ({"networks": {"bsc": {"block_time_s": "fast"}}}, "networks.bsc.block_time_s"),
        ({"head": {"quorum": -1}}, "head.quorum"),
        ({"head": {"stale_s": -1}}, "head.stale_s"),
        ({"head": {"inconsistent_cooldown_s": 0}}, "head.inconsistent_cooldown_s"),
    ):
        with pytest.raises(ConfigError, match=path):
            config_from_dict(raw)


def test_the_removed_rate_slack_key_is_refused_naming_why() -> None:
    """An old file's speed rule is refused, not silently read as meaning something."""
    with pytest.raises(ConfigError, match=r"head\.rate_slack_blocks: removed"):
        config_from_dict({"head": {"rate_slack_blocks": 4}})
    with pytest.raises(ConfigError, match=r"head\.max_lead: removed.*head\.solo_lead"):
        config_from_dict({"head": {"max_lead": 64}})


@pytest.mark.parametrize(
    "second",
    [
        "http://h.example:8545/",
        "HTTP://H.EXAMPLE:8545",
        {"url": "http://h.example:8545", "name": "b"},
    ],
)
def test_the_same_node_listed_twice_is_refused_naming_both_paths(second: object) -> None:
    """One node twice would be two votes for its own word (its finalized mark)."""
    nodes = ["http://h.example:8545", second]
    with pytest.raises(ConfigError) as err:
        config_from_dict({"networks": {"bsc": {"upstreams": nodes}}})
    text = str(err.value)
    assert "networks.bsc.upstreams[1].url" in text and "networks.bsc.upstreams[0]" in text
    assert "h.example" not in text  # a URL may hold a provider's key


def test_default_ports_are_the_same_node() -> None:
    nodes = ["https://h.example/rpc", "https://h.example:443/rpc/"]
    with pytest.raises(ConfigError, match=r"upstreams\[1\]\.url: the same node as"):
        config_from_dict({"networks": {"bsc": {"upstreams": nodes}}})
    ok = ["https://h.example/rpc", "https://h.example/rpc2", "http://h.example/rpc"]
    assert len(config_from_dict({"networks": {"bsc": {"upstreams": ok}}}).network("bsc").nodes) == 3
