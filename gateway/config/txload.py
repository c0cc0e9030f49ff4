"""Reading the transaction settings of a network or plan table (the shapes: txconfig.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gateway.config.schema import ConfigError
from gateway.config.txconfig import MODES, NetworkTxConfig, PlanTxConfig


def _number(table: Mapping[str, Any], key: str, default: float, path: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{path}.{key}: expected a non-negative number")
    return float(value)


def _count(table: Mapping[str, Any], key: str, default: int, path: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}.{key}: expected a positive integer")
    return value


def network_tx(path: str, table: Mapping[str, Any]) -> NetworkTxConfig:
    """The transaction settings of the network table at ``path``; ConfigError if wrong."""
    d = NetworkTxConfig()
    broadcast = table.get("tx_broadcast", d.broadcast)
    if broadcast not in ("all", "one"):
        raise ConfigError(f'{path}.tx_broadcast: must be "all" or "one"')
    urls = table.get("private_tx", [])
    if not isinstance(urls, list):
        raise ConfigError(f"{path}.private_tx: expected a list of http(s) URLs")
    for i, url in enumerate(urls):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{path}.private_tx[{i}]: not an http(s) URL")
    timeout = _number(table, "tx_timeout_s", d.timeout_s, path)
    if timeout <= 0:
        raise ConfigError(f"{path}.tx_timeout_s: must be above 0")
    return NetworkTxConfig(
        broadcast=broadcast,
        private_tx=tuple(urls),
        per_sender_rate=_number(table, "tx_per_sender_rate", d.per_sender_rate, path),
        per_sender_burst=_count(table, "tx_per_sender_burst", d.per_sender_burst, path),
        timeout_s=timeout,
    )


def plan_tx(path: str, table: Mapping[str, Any]) -> PlanTxConfig:
    """The transaction settings of the plan table at ``path``; ConfigError if wrong."""
    d = PlanTxConfig()
    mode = table.get("private_tx", d.private_tx)
    if mode not in MODES:
        raise ConfigError(f'{path}.private_tx: must be "on", "fallback" or "off"')
    return PlanTxConfig(
        private_tx=mode,
        bundle_rate=_number(table, "bundle_rate", d.bundle_rate, path),
        bundle_burst=_count(table, "bundle_burst", d.bundle_burst, path),
    )
