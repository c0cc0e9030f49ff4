"""Config loading: TOML + env, unknown keys and bad values named by their path."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, config_from_dict, load_config

EXAMPLE = Path(__file__).parents[2] / "gateway.example.toml"


def test_defaults_match_the_spec() -> None:
    cfg = config_from_dict({})
    assert [(n.name, n.prefix, n.chain_id) for n in cfg.networks] == [
        ("bsc", "/bsc", 56),
        ("opbnb", "/opbnb", 204),
    ]
    free, payg = cfg.plan("free"), cfg.plan("payg")
    assert (free.rate, free.burst, payg.rate, payg.burst) == (25, 50, 300, 600)
    assert free.cost("eth_getLogs") == 3 and free.cost("eth_call") == 1
    assert cfg.limits.max_body_bytes == 1_048_576 and cfg.limits.max_batch == 1000
    assert cfg.redis.fail_open is False
    methods = cfg.network("bsc").methods
    assert "eth_sendRawTransaction" in methods and "eth_call" in methods
    assert not any(m.startswith(("admin_", "debug_", "personal_", "eth_sign")) for m in methods)


def test_the_example_file_loads() -> None:
    cfg = load_config(EXAMPLE, env={})
    assert cfg.network("bsc").chain_id == 56


def test_env_overrides() -> None:
    cfg = config_from_dict(
        {},
        env={
            "GATEWAY_REDIS_URL": "redis://r:6379/0",
            "GATEWAY_UPSTREAM_BSC": "http://a:8545, http://b:8545",
            "GATEWAY_UPSTREAM_OPBNB": "http://c:8545",
        },
    )
    assert cfg.redis.url == "redis://r:6379/0"
    assert cfg.network("bsc").upstreams == ("http://a:8545", "http://b:8545")
    assert cfg.network("opbnb").upstreams == ("http://c:8545",)


def test_config_file_from_env(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text("[limits]\nmax_batch = 5\n")
    assert load_config(env={"GATEWAY_CONFIG": str(path)}).limits.max_batch == 5


@pytest.mark.parametrize(
    "raw,path",
    [
        ({"nope": 1}, "nope"),
        ({"limits": {"max_bodyy": 1}}, "limits.max_bodyy"),
        ({"limits": {"max_batch": "ten"}}, "limits.max_batch"),
        ({"limits": {"max_batch": -1}}, "limits.max_batch"),
        ({"redis": {"fail_open": "yes"}}, "redis.fail_open"),
        ({"networks": {"bsc": {"upstreams": ["ftp://x"]}}}, "networks.bsc.upstreams[0]"),
        ({"networks": {"bsc": {"upstreams": []}}}, "networks.bsc.upstreams"),
        ({"networks": {"bsc": {"prefix": "bsc"}}}, "networks.bsc.prefix"),
        ({"networks": {"bsc": {"chainid": 56}}}, "networks.bsc.chainid"),
        (
            {"networks": {"bsc": {"extra_methods": ["admin_peers"]}}},
            "networks.bsc.extra_methods[0]",
        ),
        ({"networks": {"x": {"upstreams": ["http://a"]}}}, "networks.x.chain_id"),
        ({"plans": {"free": {"rate": 0}}}, "plans.free.rate"),
        ({"plans": {"free": {"weights": {"eth_getLogs": -1}}}}, "plans.free.weights.eth_getLogs"),
        ({"plans": {"free": {"colour": "red"}}}, "plans.free.colour"),
        ({"default_plan": "gold"}, "default_plan"),
        ({"server": {"trusted_proxies": ["10.0.0.0/33"]}}, "server.trusted_proxies[0]"),
    ],
)
def test_errors_name_the_config_path(raw: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict(raw)
    assert str(exc.value).startswith(path + ":"), str(exc.value)


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})
    # the server reads the file as `gateway config check` does: a folder is one clear line
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        load_config(tmp_path, env={})


@pytest.mark.parametrize(
    ("key", "url", "message"),
    [
        ("upstreams", "ws://n:1", "networks.bsc.upstreams[0]: not an http(s) URL"),
        ("upstreams", "https://", "networks.bsc.upstreams[0]: not an http(s) URL"),
        ("ws_upstreams", "http://n:1", "networks.bsc.ws_upstreams[0]: not a ws(s) URL"),
        ("ws_upstreams", 5, "networks.bsc.ws_upstreams[0]: not a ws(s) URL"),
    ],
)
def test_node_url_lists_name_the_bad_entry(key: str, url: object, message: str) -> None:
    net = {"chain_id": 56, "upstreams": ["http://n:1"], key: [url]}
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"networks": {"bsc": net}}, env={})
    assert str(exc.value) == message


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"ws": {"socket_lease_s": 2}}, "ws.socket_lease_s: must be at least 3"),
        ({"ws": {"socket_lease_s": 3}}, None),
        ({"ws": {"charge_interval_s": 0}}, "ws.charge_interval_s: must be above 0"),
        (
            {"filters": {"max_filter_bytes": 1023}},
            "filters.max_filter_bytes: must be at least 1024",
        ),
        ({"filters": {"ttl_s": 0.0}}, "filters.ttl_s: must be above 0"),
        ({"hedge": {"window": 0}}, "hedge.window: must be at least 1"),
        (
            {"networks": {"bsc": {"block_time_s": -1}}},
            "networks.bsc.block_time_s: expected a non-negative number (seconds, 0 = no check)",
        ),
        (
            {"plans": {"free": {"price_per_million_cu": True}}},
            "plans.free.price_per_million_cu: expected a non-negative number (0 = free)",
        ),
    ],
)
def test_floors_name_the_path_and_the_floor(raw: dict[str, object], message: str | None) -> None:
    """One floor check serves every section: the value at its floor passes, below it is refused."""
    if message is None:
        config_from_dict(raw)
        return
    with pytest.raises(ConfigError) as exc:
        config_from_dict(raw)
    assert str(exc.value) == message


def test_server_door_defaults_to_the_lean_door_and_is_checked() -> None:
    assert config_from_dict({}).server.door == "lean"
    assert config_from_dict({"server": {"door": "app"}}).server.door == "app"
    assert config_from_dict({}, {"GATEWAY_SERVER_DOOR": "app"}).server.door == "app"
    with pytest.raises(ConfigError, match=r'^server\.door: must be "app" or "lean"'):
        config_from_dict({"server": {"door": "fast"}})


def test_waits_for_the_bucket_default_to_one_second_and_a_plan_may_set_its_own() -> None:
    cfg = config_from_dict({})
    assert (cfg.limits.max_wait_s, cfg.limits.max_waiting) == (1.0, 32)
    assert cfg.max_wait_s("free") == 1.0 and cfg.max_wait_s("payg") == 1.0
    cfg = config_from_dict({"limits": {"max_wait_s": 0.5}, "plans": {"payg": {"max_wait_s": 0}}})
    assert cfg.max_wait_s("free") == 0.5 and cfg.max_wait_s("payg") == 0.0
    with pytest.raises(ConfigError, match=r"^plans\.free\.max_wait_s: expected a non-negative"):
        config_from_dict({"plans": {"free": {"max_wait_s": -1}}})
    with pytest.raises(ConfigError, match=r"^limits\.max_waiting: must not be negative"):
        config_from_dict({"limits": {"max_waiting": -1}})
    with pytest.raises(ConfigError, match=r"^limits\.max_wait_s: must not be negative"):
        config_from_dict({"limits": {"max_wait_s": -0.1}})
