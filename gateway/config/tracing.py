"""The ``[tracing]`` section: OpenTelemetry traces of every call, sent over OTLP/HTTP.

Same rules as schema.py (frozen dataclasses, the field defaults are the shipped
defaults, load.py type-checks TOML against the annotations); reached as
``gateway.config.TracingConfig``. The section checks its own values when it is
built (``__post_init__``), so a wrong one is refused naming its path.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.config.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """Traces (gateway/tracing): off while ``otlp_endpoint`` is empty, the default.

    ``otlp_endpoint``: the collector's OTLP/HTTP address; a URL with no path
    gets ``/v1/traces`` (``http://collector:4318`` posts to
    ``http://collector:4318/v1/traces``). Headers the collector wants (a
    token) come from the standard ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` /
    ``OTEL_EXPORTER_OTLP_HEADERS`` environment variables, never from this
    file: a URL with credentials or a query is refused. ``sample_ratio``: the
    share of calls traced (with ``follow_client_sampling``, a call with a
    client's ``traceparent`` is traced as its sampled flag says instead).
    """

    otlp_endpoint: str = ""
    service_name: str = "rpc-gateway"
    sample_ratio: float = 1.0
    # A client's traceparent is always continued (its trace id, its span as the
    # parent). Whether its sampled flag decides if the call is traced: false, the
    # default, draws every call by sample_ratio (a traced call costs several times
    # an untraced one, and any client can send the flag); true follows the flag.
    follow_client_sampling: bool = False
    # Spans wait in memory at most this long before they are sent, in batches;
    # beyond max_queue_spans waiting, new spans are dropped (never a stall).
    export_interval_s: float = 5.0
    export_timeout_s: float = 10.0
    max_queue_spans: int = 2048

    def __post_init__(self) -> None:
        _check(self)


def _check(cfg: TracingConfig) -> None:
    """Refuse a wrong ``[tracing]`` value, naming its path (never echoing the endpoint)."""
    if cfg.otlp_endpoint:
        try:
            parts = urlsplit(cfg.otlp_endpoint)
            parts.port  # noqa: B018 (raises ValueError on a bad port)
        except ValueError:
            raise ConfigError("tracing.otlp_endpoint: not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                "tracing.otlp_endpoint: expected an http(s) URL with a host "
                '(e.g. "http://otel-collector:4318")'
            )
        if parts.username is not None or parts.query or parts.fragment:
            # the exporter's own failure lines print the URL it posts to
            raise ConfigError(
                "tracing.otlp_endpoint: no credentials or query in the URL; a collector's "
                "token goes in OTEL_EXPORTER_OTLP_TRACES_HEADERS"
            )
    if not cfg.service_name.strip():
        raise ConfigError("tracing.service_name: must not be empty")
    if not 0.0 <= cfg.sample_ratio <= 1.0:
        raise ConfigError("tracing.sample_ratio: must be in [0, 1]")
    if cfg.export_interval_s <= 0 or cfg.export_timeout_s <= 0:
        raise ConfigError("tracing: export_interval_s and export_timeout_s must be positive")
    if cfg.max_queue_spans < 1:
        raise ConfigError("tracing.max_queue_spans: must be at least 1")


def traces_url(endpoint: str) -> str:
    """Where spans are posted: ``endpoint``, with ``/v1/traces`` when it names no path."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return parts._replace(path="/v1/traces").geturl()
    return endpoint
