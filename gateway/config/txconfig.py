"""Transaction settings: per network (broadcast, private endpoints, sender limit) and per plan.

Network table keys (``[networks.<name>]``)::

    tx_broadcast = "all"        # "all": every node in service at once; "one": like any call
    private_tx = ["https://...",  # builder / relay endpoints of the private route: a URL
      { url = "https://...", name = "bloxroute", dialect = "bloxroute",
        auth_header_env = "BLXR_AUTH" }]  # or a table (dialect, secrets' env names;
      # status_method = "eth_getTxStatus", status_batch = false: its own status API)
    tx_per_sender_rate = 5.0    # raw transactions per second per sender, all processes
    tx_per_sender_burst = 20
    tx_timeout_s = 5.0          # one private endpoint / broadcast attempt
    tx_max_bytes = 131072       # one raw transaction, blobs aside (geth's 128 KiB)
    tx_bundle_max = 50          # transactions in one eth_sendBundle
    tx_track_blocks = 200       # a private transaction is followed this many blocks at most
    tx_track_interval_s = 1.0   # how often the transactions followed are looked up

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

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from gateway.config.schema import BuilderConfig, ConfigError, NetworkConfig, PlanConfig

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
        "tx_track_blocks",
        "tx_track_interval_s",
    }
)
DIALECTS: Final = ("plain", "48club", "blockrazor", "bloxroute")
_BUILDER_KEYS: Final = frozenset(
    {"url", "name", "dialect", "auth_header_env", "sign_key_env", "status_method", "status_batch"}
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


def _url(value: Any, where: str) -> str:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{where}: not an http(s) URL")
    assert isinstance(value, str)
    return value


def _host(url: str) -> str:
    """An endpoint's default name: its host and port, never its path or query (a key)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def _builder(where: str, entry: Any, env: Mapping[str, str]) -> BuilderConfig:
    """One ``private_tx`` entry: a URL (plain dialect) or a table; secrets' variables set."""
    if isinstance(entry, str):
        url = _url(entry, where)
        return BuilderConfig(url=url, name=_host(url))
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a URL or a table {{ url, dialect, ... }}")
    for key in entry:
        if key not in _BUILDER_KEYS:
            raise ConfigError(f"{where}.{key}: unknown config key")
    url = _url(entry.get("url"), f"{where}.url")
    fields: dict[str, str] = {}
    for key in ("name", "dialect", "auth_header_env", "sign_key_env", "status_method"):
        value = entry.get(key, "")
        if not isinstance(value, str):
            raise ConfigError(f"{where}.{key}: expected a string")
        fields[key] = value
    dialect = fields["dialect"] or "plain"
    if dialect not in DIALECTS:
        raise ConfigError(f"{where}.dialect: must be one of {', '.join(DIALECTS)}")
    for key in ("auth_header_env", "sign_key_env"):
        var = fields[key]
        if var and not env.get(var):
            raise ConfigError(f"{where}.{key}: the environment variable {var} is not set")
    if fields["sign_key_env"] and dialect != "48club":
        raise ConfigError(f"{where}.sign_key_env: only the 48club dialect signs bundles")
    status = fields["status_method"]
    if status and not status.replace("_", "").isalnum():
        raise ConfigError(f"{where}.status_method: expected a JSON-RPC method name")
    batch = entry.get("status_batch", False)
    if not isinstance(batch, bool):
        raise ConfigError(f"{where}.status_batch: expected true or false")
    if batch and not status:
        raise ConfigError(f"{where}.status_batch: needs {where}.status_method")
    return BuilderConfig(
        url=url,
        name=fields["name"] or _host(url),
        dialect=dialect,
        auth_header_env=fields["auth_header_env"],
        sign_key_env=fields["sign_key_env"],
        status_method=status,
        status_batch=batch,
    )


def network_tx(
    path: str, table: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The transaction fields of the network table at ``path``; ConfigError if wrong."""
    d = NetworkConfig("", "", 1, (), frozenset())
    env = os.environ if env is None else env
    broadcast = table.get("tx_broadcast", d.tx_broadcast)
    if broadcast not in ("all", "one"):
        raise ConfigError(f'{path}.tx_broadcast: must be "all" or "one"')
    entries = table.get("private_tx", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}.private_tx: expected a list of URLs or endpoint tables")
    builders = [_builder(f"{path}.private_tx[{i}]", e, env) for i, e in enumerate(entries)]
    seen: set[str] = set()
    for i, b in enumerate(builders):
        if b.name in seen:
            if isinstance(entries[i], Mapping) and entries[i].get("name"):
                raise ConfigError(f"{path}.private_tx[{i}].name: {b.name!r} is used twice")
            builders[i] = dataclasses.replace(b, name=f"{b.name}#{i + 1}")  # same host twice
        seen.add(builders[i].name)
    urls = [b.url for b in builders]
    timeout = non_negative(table, "tx_timeout_s", d.tx_timeout_s, path)
    if timeout <= 0:
        raise ConfigError(f"{path}.tx_timeout_s: must be above 0")
    _check_offered(path, table, bool(builders))
    return {
        "tx_broadcast": broadcast,
        "private_tx": tuple(urls),
        "tx_per_sender_rate": non_negative(table, "tx_per_sender_rate", d.tx_per_sender_rate, path),
        "tx_per_sender_burst": _count(table, "tx_per_sender_burst", d.tx_per_sender_burst, path),
        "tx_timeout_s": timeout,
        "tx_max_bytes": _count(table, "tx_max_bytes", d.tx_max_bytes, path),
        "tx_bundle_max": _count(table, "tx_bundle_max", d.tx_bundle_max, path),
        "builders": tuple(builders),
        "tx_track_blocks": _count(table, "tx_track_blocks", d.tx_track_blocks, path),
        "tx_track_interval_s": _positive(table, "tx_track_interval_s", d.tx_track_interval_s, path),
    }


def _positive(table: Mapping[str, Any], key: str, default: float, path: str) -> float:
    value = non_negative(table, key, default, path)
    if value <= 0:
        raise ConfigError(f"{path}.{key}: must be above 0")
    return value


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
