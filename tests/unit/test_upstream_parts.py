"""The small parts of the upstream package: URL redaction, rate-limited failure lines, the
newHeads and chain-id parsers, ws URL pairing, JSON log lines, the new config."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.config import DEFAULT_METHODS, ConfigError, NetworkConfig, config_from_dict
from gateway.config.redact import redact_url, scrub
from gateway.ops.logsetup import formatter
from gateway.redis.failurelog import FailureLog, RateLimitedLog, redis_failure
from gateway.server.workers import config_to_raw
from gateway.upstream.health import CHECK_BODY, parse_chain_id
from gateway.upstream.newheads import header_report, ws_urls

KEY = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://bsc-mainnet.nodereal.io/v1/{KEY}", "https://bsc-mainnet.nodereal.io/v1/***"),
        (f"https://mainnet.infura.io/v3/{KEY}", "https://mainnet.infura.io/v3/***"),
        (f"https://x.bsc.quiknode.pro/{KEY}/", "https://x.bsc.quiknode.pro/***/"),
        (f"https://user:{KEY}@node:8545/", "https://***@node:8545/"),
        (f"https://node/rpc?apikey={KEY}&x=1", "https://node/rpc?apikey=***&x=***"),
        (f"https://node/?{KEY}", "https://node/?***"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("redis://:hunter22@redis:6379/0", "redis://***@redis:6379/0"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ("http://h:99999999/", "***"),  # not a URL we can take apart: nothing of it
    ],
)
def test_redact_url_masks_every_place_a_provider_puts_a_key(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_scrub_masks_the_url_and_its_secrets_in_an_error_message() -> None:
    url = f"https://u:pw-secret@node/v1/{KEY}?token=abcdef"
    text = f"400, message='Bad', url='{url}' while {KEY} and pw-secret and abcdef"
    out = scrub(text, url)
    assert KEY not in out and "pw-secret" not in out and "abcdef" not in out
    assert "https://***@node/v1/***?token=***" in out


def test_rate_limited_log_lets_one_line_per_key_and_interval_and_one_recovery() -> None:
    now = [100.0]
    lines = RateLimitedLog(30.0, clock=lambda: now[0])
    assert lines.recovered("a") is False  # nothing failed: no recovery line
    assert lines.failed("a") == 0
    assert lines.failed("a") is None and lines.failed("a") is None
    assert lines.failed("b") == 0  # another node: its own line
    now[0] += 30.0
    assert lines.failed("a") == 2  # the next line says how many were held back
    assert lines.recovered("a") is True and lines.recovered("a") is False
    assert lines.failed("a") == 0  # a new outage logs at once


def test_failure_log_names_the_redis_address_error_class_and_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.redis")
    failures = FailureLog(60.0, address="redis://:hunter22@10.0.0.5:6379/0")
    failures(ConnectionError("Error 111 connecting to 10.0.0.5:6379. Connection refused."))
    failures(ConnectionError("again"))  # held back
    failures.ok()
    failures.ok()  # one recovery line, not one per success
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("redis unavailable on the hot path redis=redis://***@10.0.0.5")
    assert "error=ConnectionError: Error 111" in lines[0]
    assert lines[1] == "redis recovered redis=redis://***@10.0.0.5:6379/0"
    assert "hunter22" not in caplog.text
    fields = json.loads(formatter("json").format(caplog.records[0]))
    assert fields["error_class"] == "ConnectionError" and fields["suppressed"] == 0
    assert fields["target"] == "redis://***@10.0.0.5:6379/0"


def test_redis_failure_helper_for_the_ws_listener() -> None:
    line = redis_failure("redis://:hunter22@h:6379/0", ConnectionError("Connection reset"))
    assert line == "redis=redis://***@h:6379/0 error=ConnectionError: Connection reset"


def test_header_report_takes_only_well_formed_notifications() -> None:
    note = {
        "jsonrpc": "2.0",
        "method": "eth_subscription",
        "params": {"subscription": "0x1", "result": {"number": "0x2a", "hash": "0xAB"}},
    }
    report = header_report(note)
    assert report is not None and (report.number, report.hash) == (42, "0xab")
    assert header_report({"jsonrpc": "2.0", "id": 1, "result": "0x1"}) is None
    bad = {"method": "eth_subscription", "params": {"result": {"number": "0x" + "f" * 40}}}
    assert header_report(bad) is None
    assert header_report({"method": "eth_subscription", "params": "x"}) is None
    assert header_report([1, 2]) is None


def test_parse_chain_id_reads_the_probe_answer() -> None:
    assert b"eth_chainId" in CHECK_BODY and CHECK_BODY.startswith(b"[")
    ok = b'[{"id":1,"result":null},{"id":"gateway-chain-check","result":"0xcc"}]'
    assert parse_chain_id(ok) == 204
    assert parse_chain_id(b'[{"id":"gateway-chain-check","error":{"code":-1}}]') is None
    assert parse_chain_id(b'[{"id":"gateway-chain-check","result":"0xzz"}]') is None
    assert parse_chain_id(b"not json") is None
    assert parse_chain_id(b'{"id":"gateway-chain-check","result":"0x38"}') == 56


def test_ws_urls_pair_by_position_or_by_address() -> None:
    def net(http: tuple[str, ...], ws: tuple[str, ...]) -> NetworkConfig:
        return NetworkConfig("bsc", "/bsc", 56, http, frozenset(DEFAULT_METHODS), ws)

    assert ws_urls(net(("http://a", "http://b"), ("ws://x", "ws://y"))) == ["ws://x", "ws://y"]
    assert ws_urls(net(("http://a", "https://b"), ("wss://b",))) == ["", "wss://b"]
    assert ws_urls(net(("http://a",), ())) == [""]


def test_config_ready_requires_and_log_format_are_checked() -> None:
    cfg = config_from_dict({"server": {"ready_requires": ["redis", "bsc"]}})
    assert cfg.server.ready_requires == ("redis", "bsc") and cfg.log.format == "text"
    with pytest.raises(ConfigError, match=r"server\.ready_requires\[0\]"):
        config_from_dict({"server": {"ready_requires": ["nosuch"]}})
    with pytest.raises(ConfigError, match=r"log\.format"):
        config_from_dict({"log": {"format": "xml"}})
    env = {"GATEWAY_LOG_FORMAT": "json", "GATEWAY_READY_REQUIRES": "any_network"}
    cfg = config_from_dict({}, env)
    assert cfg.log.format == "json" and cfg.server.ready_requires == ("any_network",)
    with pytest.raises(ConfigError, match="ws_reconnect_min_s"):
        config_from_dict({"upstream": {"ws_reconnect_min_s": 5.0, "ws_reconnect_max_s": 1.0}})
    assert config_from_dict({}).upstream.logs_max_chunks == 64
    with pytest.raises(ConfigError, match=r"upstream\.logs_max_chunks"):
        config_from_dict({"upstream": {"logs_max_chunks": 0}})


def test_workers_get_every_section_of_the_config() -> None:
    """`serve --workers` hands the config over as TOML-shaped JSON: log, ws and admission too."""
    cfg = config_from_dict(
        {"log": {"format": "json"}, "ws": {"heartbeat_s": 5.0}, "admission": {"mode": "exact"}}
    )
    assert config_from_dict(json.loads(json.dumps(config_to_raw(cfg)))) == cfg
