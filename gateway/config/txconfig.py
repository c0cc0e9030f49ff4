"""Transaction settings: per network (broadcast, private endpoints, sender limit) and per plan.

Network table keys (``[networks.<name>]``)::

    tx_broadcast = "all"        # "all": every node in service at once; "one": like any call
    private_tx = ["https://..."]  # builder / relay endpoints of the private route
    tx_per_sender_rate = 5.0    # raw transactions per second per sender, all processes
    tx_per_sender_burst = 20
    tx_timeout_s = 5.0          # one private endpoint / broadcast attempt

Plan table keys (``[plans.<name>]``)::

    private_tx = "off"          # "on" | "fallback" | "off": the route of the plan's keys
    bundle_rate = 1.0           # eth_sendBundle calls per second per key
    bundle_burst = 5

Read and checked here into NetworkConfig / PlanConfig fields of the same
names. A key's own choice (``gateway keys update KEY
--private-tx``) overrides the
plan's; see gateway/tx/keymode.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from gateway.config.schema import ConfigError, NetworkConfig, PlanConfig

MODES: Final = ("on", "fallback", "off")
NETWORK_KEYS: Final = frozenset(
    {"tx_broadcast", "private_tx", "tx_per_sender_rate", "tx_per_sender_burst", "tx_timeout_s"}
)
PLAN_KEYS: Final = frozenset({"private_tx", "bundle_rate", "bundle_burst"})


def non_negative(
    table: Mapping[str, Any], key: str, default: float, path: str, meaning: str = ""
) -> float:
    """``table[key]`` (else ``default``) as a number >= 0; ``meaning`` ends the error message."""
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{path}.{key}: expected a non-negative number{meaning}")
    return float(value)


def _count(table: Mapping[str, Any], key: str, default: int, path: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path}.{key}: expected a positive integer")
    return value


def network_tx(path: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The transaction fields of the network table at ``path``; ConfigError if wrong."""
    d = NetworkConfig("", "", 1, (), frozenset())
    broadcast = table.get("tx_broadcast", d.tx_broadcast)
    if broadcast not in ("all", "one"):
        raise ConfigError(f'{path}.tx_broadcast: must be "all" or "one"')
    urls = table.get("private_tx", [])
    if not isinstance(urls, list):
        raise ConfigError(f"{path}.private_tx: expected a list of http(s) URLs")
    for i, url in enumerate(urls):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{path}.private_tx[{i}]: not an http(s) URL")
    timeout = non_negative(table, "tx_timeout_s", d.tx_timeout_s, path)
    if timeout <= 0:
        raise ConfigError(f"{path}.tx_timeout_s: must be above 0")
    return {
        "tx_broadcast": broadcast,
        "private_tx": tuple(urls),
        "tx_per_sender_rate": non_negative(table, "tx_per_sender_rate", d.tx_per_sender_rate, path),
        "tx_per_sender_burst": _count(table, "tx_per_sender_burst", d.tx_per_sender_burst, path),
        "tx_timeout_s": timeout,
    }


def plan_tx(path: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The transaction fields of the plan table at ``path``; ConfigError if wrong."""
    d = PlanConfig("", "", 1.0, 1)
    mode = table.get("private_tx", d.private_tx)
    if mode not in MODES:
        raise ConfigError(f'{path}.private_tx: must be "on", "fallback" or "off"')
    return {
        "private_tx": mode,
        "bundle_rate": non_negative(table, "bundle_rate", d.bundle_rate, path),
        "bundle_burst": _count(table, "bundle_burst", d.bundle_burst, path),
    }
