"""The ``[tracing]`` section: off by default, each wrong value refused naming its path."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.config.tracing import traces_url


def test_off_by_default() -> None:
    cfg = config_from_dict({}).tracing
    assert cfg.otlp_endpoint == "" and cfg.sample_ratio == 1.0
    assert cfg.service_name == "rpc-gateway"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"otlp_endpoint": "collector:4318"}, "tracing.otlp_endpoint: expected an http(s) URL"),
        ({"otlp_endpoint": "grpc://collector:4317"}, "tracing.otlp_endpoint: expected an http(s)"),
        ({"otlp_endpoint": "http://collector:99999"}, "tracing.otlp_endpoint: not a URL"),
        ({"sample_ratio": 1.5}, "tracing.sample_ratio: must be in [0, 1]"),
        ({"sample_ratio": -0.1}, "tracing.sample_ratio: must be in [0, 1]"),
        ({"service_name": "  "}, "tracing.service_name: must not be empty"),
        ({"export_interval_s": 0}, "tracing: export_interval_s and export_timeout_s must be"),
        ({"max_queue_spans": 0}, "tracing.max_queue_spans: must be at least 1"),
        ({"endpoint": "http://c:4318"}, "tracing.endpoint: unknown config key"),
    ],
)
def test_a_wrong_value_names_its_path(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"tracing": table})
    assert str(exc.value).startswith(message), exc.value


@pytest.mark.parametrize(
    "endpoint",
    ["ftp://user:t0ken@collector", "http://user:t0ken@collector:4318", "http://c:4318/?k=t0ken"],
)
def test_no_secret_in_the_endpoint_and_none_echoed(endpoint: str) -> None:
    """The exporter's failure lines print its URL, so a token belongs in the headers'
    variable; the refusal names the setting, never its value."""
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"tracing": {"otlp_endpoint": endpoint}})
    assert str(exc.value).startswith("tracing.otlp_endpoint: ")
    assert "t0ken" not in str(exc.value)


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otlp.example.com/otlp/v1/traces", "https://otlp.example.com/otlp/v1/traces"),
    ],
)
def test_a_bare_endpoint_gets_the_traces_path(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url
