"""Transaction settings: per network (broadcast, private endpoints, sender limit) and per plan.

Network table keys (``[networks.<name>]``)::

    tx_broadcast = "all"        # "all": every node in service at once; "one": like any call
    private_tx = ["https://..."]  # builder / relay endpoints of the private route
    tx_per_sender_rate = 5.0    # raw transactions per second per sender, all processes
    tx_per_sender_burst = 20
    tx_timeout_s = 5.0          # one private endpoint / broadcast attempt
    tx_max_bytes = 131072       # one raw transaction, blobs aside (geth's 128 KiB)
    tx_bundle_max = 50          # transactions in one eth_sendBundle

Plan table keys (``[plans.<name>]``)::

    private_tx = "off"          # "on" | "fallback" | "off": the route of the plan's keys
    bundle_rate = 1.0           # eth_sendBundle calls per second per key
    bundle_burst = 5

Read and checked here into NetworkConfig / PlanConfig fields of the same
names. A key's own choice (``gateway keys update KEY
--private-tx``) overrides the
plan's; see gateway/tx/keymode.py.

The methods that carry a raw transaction (``RAW_TX_METHODS``) are answered
by the gateway's transaction path only (decoded, checked against the
chain, the sender limit, the key's route): offered through
``extra_methods`` they would be forwarded to a node as they came, so such
an entry (or a pattern that reaches one) is refused at load, naming its
path. ``methods`` may list them by name (the gateway answers them);
``eth_sendBundle`` and ``eth_sendPrivateTransaction`` only where the
network has private endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from gateway.config.schema import ConfigError, NetworkConfig, PlanConfig

MODES: Final = ("on", "fallback", "off")
NETWORK_KEYS: Final = frozenset(
    {
        "tx_broadcast",
        "private_tx",
        "tx_per_sender_rate",
        "tx_per_sender_burst",
        "tx_timeout_s",
        "tx_max_bytes",
        "tx_bundle_max",
    }
)
RAW_TX_METHODS: Final = (
    "eth_sendRawTransaction",
    "eth_sendRawTransactionConditional",
    "eth_sendPrivateTransaction",
    "eth_sendBundle",
)
PRIVATE_ONLY: Final = ("eth_sendPrivateTransaction", "eth_sendBundle")
_WHY: Final = (
    "it carries a raw transaction, which only the gateway's transaction path may send "
    "(decoded, checked against the chain and the sender limit, sent on the key's route)"
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
    _check_offered(path, table, bool(urls))
    return {
        "tx_broadcast": broadcast,
        "private_tx": tuple(urls),
        "tx_per_sender_rate": non_negative(table, "tx_per_sender_rate", d.tx_per_sender_rate, path),
        "tx_per_sender_burst": _count(table, "tx_per_sender_burst", d.tx_per_sender_burst, path),
        "tx_timeout_s": timeout,
        "tx_max_bytes": _count(table, "tx_max_bytes", d.tx_max_bytes, path),
        "tx_bundle_max": _count(table, "tx_bundle_max", d.tx_bundle_max, path),
    }


def _reached(method: str) -> str | None:
    """The raw-transaction method a name or ``prefix*`` pattern reaches, if any."""
    name = method.lower()
    for raw in RAW_TX_METHODS:
        low = raw.lower()
        if name == low or (name.endswith("*") and low.startswith(name[:-1])):
            return raw
    return None


def _check_offered(path: str, table: Mapping[str, Any], private: bool) -> None:
    """Refuse what would send a raw transaction past the transaction path."""
    extra = table.get("extra_methods", [])
    items = list(extra) if isinstance(extra, Mapping | list) else []
    for i, method in enumerate(items):
        raw = _reached(method) if isinstance(method, str) else None
        if raw is not None:
            where = f"{path}.extra_methods" + (
                f".{method}" if isinstance(extra, Mapping) else f"[{i}]"
            )
            raise ConfigError(f"{where}: {raw} may not be offered as an extra method ({_WHY})")
    methods = table.get("methods", [])
    for i, method in enumerate(methods if isinstance(methods, list) else []):
        raw = _reached(method) if isinstance(method, str) else None
        if raw is None:
            continue
        if method.endswith("*"):
            raise ConfigError(f"{path}.methods[{i}]: the pattern reaches {raw} ({_WHY})")
        if method != raw:
            raise ConfigError(f"{path}.methods[{i}]: spell it {raw} (the gateway answers it)")
        if raw in PRIVATE_ONLY and not private:
            raise ConfigError(
                f"{path}.methods[{i}]: {raw} needs private endpoints ({path}.private_tx)"
            )


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
