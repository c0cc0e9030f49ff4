"""Configuration: frozen dataclasses loaded from TOML, then environment overrides.

Loading happens in stages (read TOML, apply env, reject unknown keys, apply
defaults, validate) so that every mistake is reported with the config path
that caused it, e.g. ``networks.bsc.upstreams[0]: not an http(s) URL``.
Nothing here is mutable after loading: the app receives one ``Config`` and
passes pieces of it down.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class ConfigError(ValueError):
    """A config value is wrong; the message starts with its path."""


# Methods a public read endpoint offers by default. Everything that signs,
# administers the node or exposes its internals is left out on purpose.
DEFAULT_METHODS: tuple[str, ...] = (
    "eth_blockNumber",
    "eth_call",
    "eth_chainId",
    "eth_estimateGas",
    "eth_feeHistory",
    "eth_gasPrice",
    "eth_getBalance",
    "eth_getBlockByHash",
    "eth_getBlockByNumber",
    "eth_getBlockReceipts",
    "eth_getBlockTransactionCountByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getCode",
    "eth_getLogs",
    "eth_getProof",
    "eth_getStorageAt",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByHash",
    "eth_getTransactionCount",
    "eth_getTransactionReceipt",
    "eth_getUncleByBlockHashAndIndex",
    "eth_getUncleByBlockNumberAndIndex",
    "eth_getUncleCountByBlockHash",
    "eth_getUncleCountByBlockNumber",
    "eth_maxPriorityFeePerGas",
    "eth_protocolVersion",
    "eth_sendRawTransaction",
    "eth_syncing",
    "net_listening",
    "net_peerCount",
    "net_version",
    "web3_clientVersion",
    "web3_sha3",
)

# Prefixes that are never offered, even if an operator lists them: a public
# gateway must not expose node administration or server-side signing.
FORBIDDEN_METHOD_PREFIXES: tuple[str, ...] = (
    "admin_",
    "debug_",
    "personal_",
    "miner_",
    "txpool_",
    "eth_sign",
    "eth_sendTransaction",
)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8545
    workers: int = 1
    access_log: bool = True
    # aiohttp has no header-read timeout of its own (gateway/server.py adds it).
    # Seconds a client may take to send request headers (from connection open
    # or its first byte) and then its body; 0 turns a check off.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_connections: int = 10_000  # per process; 0 = no cap
    drain_timeout_s: float = 15.0  # SIGTERM: in-flight calls get this long to finish
    # Trust X-Forwarded-For from these proxies (CIDRs) for the IP allowlist.
    trusted_proxies: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_body_bytes: int = 1_048_576
    max_batch: int = 100
    max_json_depth: int = 64
    upstream_connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 10.0
    max_in_flight: int = 2_048


@dataclass(frozen=True, slots=True)
class RedisConfig:
    url: str = ""  # empty: embedded redis-server under data_dir
    data_dir: str = ".gateway-data"
    cluster: bool = False
    fail_open: bool = False
    timeout_ms: int = 250
    connect_timeout_ms: int = 500
    max_connections: int = 64
    prefix: str = "gw"


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    name: str
    prefix: str
    chain_id: int
    upstreams: tuple[str, ...]
    methods: frozenset[str]
    # Nodes' WebSocket URLs for subscriptions; default: each HTTP upstream
    # with the ws/wss scheme (SPEC §9).
    ws_upstreams: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlanConfig:
    name: str
    title: str
    rate: float  # sustained compute units per second
    burst: int  # bucket size
    daily_quota: int = 0  # compute units per UTC day, 0 = none
    weights: Mapping[str, int] = field(default_factory=dict)
    # WebSocket caps (0 = the [ws] section's defaults).
    ws_max_sockets: int = 0  # open sockets per key, across every gateway process
    ws_max_subscriptions: int = 0  # subscriptions per socket

    def cost(self, method: str) -> int:
        """Compute units charged for one call of ``method``."""
        return self.weights.get(method, 1)


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    probe_interval_s: float = 3.0
    max_lag_blocks: int = 20
    fail_threshold: int = 3
    cooldown_s: float = 15.0
    retry_budget: float = 0.2
    max_attempts: int = 3
    connections_per_node: int = 256
    # One attempt's cap inside limits.upstream_timeout_s, so a slow node
    # leaves time to fail over; 0 = the whole deadline.
    attempt_timeout_s: float = 5.0
    probe_timeout_s: float = 2.0
    client: str = "lean"  # "lean" (gateway.nodeclient) or "aiohttp" (ClientSession)
    keepalive_s: float = 15.0  # idle pooled connections to a node are closed after this


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    enabled: bool = True
    session_max_age_s: int = 7 * 24 * 3600
    secure_cookies: bool = False
    public_url: str = ""  # shown in endpoint examples; empty = from the request
    max_keys_per_account: int = 20


@dataclass(frozen=True, slots=True)
class WsConfig:
    """WebSocket endpoint (SPEC §9): limits, heartbeats, upstream subscriptions."""

    enabled: bool = True
    max_message_bytes: int = 1_048_576  # a bigger frame closes the socket (1009)
    heartbeat_s: float = 30.0  # ping an idle socket this often; no pong in time closes it
    max_sockets_per_key: int = 100  # across all processes; a plan's ws_max_sockets overrides
    # Each open socket holds a lease in Redis, renewed every third of this; a
    # crashed process's leases lapse after it (gateway/ws/leases.py).
    socket_lease_s: float = 60.0
    max_subscriptions_per_socket: int = 100  # a plan's ws_max_subscriptions overrides
    max_in_flight_per_socket: int = 32  # calls worked on at once; further frames wait unread
    # A client that stops reading is dropped once this many bytes wait for it
    # (on top of the kernel's and the transport's own buffers).
    send_queue_bytes: int = 1_048_576
    # Notifications are charged to the key's bucket in one Redis call per key
    # per interval (not one per notification per socket).
    charge_interval_s: float = 1.0
    # Safety net under pub/sub: keys with open sockets are re-read this often
    # (one pipelined round trip), so a lost revocation message still closes them.
    recheck_interval_s: float = 30.0
    gap_fill_max_blocks: int = 128  # on failover, missed newHeads fetched by number, at most
    reorg_memory_blocks: int = 64  # blocks of delivered logs kept to detect re-orgs
    upstream_connect_timeout_s: float = 5.0
    upstream_request_timeout_s: float = 10.0
    reconnect_delay_s: float = 0.5  # between failed attempts to reach any node
    # The probes see the network 2+ blocks past what this node sent for this
    # long: fail over to another node (0 = off). A halted chain moves no one.
    head_stall_s: float = 10.0
    compress: bool = False  # permessage-deflate costs ~100s of KB per socket
    close_timeout_s: float = 2.0  # a close frame (4001, 1001) waits this long for the reply


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = ServerConfig()
    limits: LimitsConfig = LimitsConfig()
    redis: RedisConfig = RedisConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    dashboard: DashboardConfig = DashboardConfig()
    ws: WsConfig = WsConfig()
    networks: tuple[NetworkConfig, ...] = ()
    plans: tuple[PlanConfig, ...] = ()
    default_plan: str = "free"

    def plan(self, name: str) -> PlanConfig:
        for plan in self.plans:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def network(self, name: str) -> NetworkConfig:
        for net in self.networks:
            if net.name == name:
                return net
        raise KeyError(name)


DEFAULT_NETWORKS: dict[str, dict[str, Any]] = {
    "bsc": {
        "prefix": "/bsc",
        "chain_id": 56,
        "upstreams": [
            "https://bsc-dataseed.bnbchain.org",
            "https://bsc-dataseed-public.bnbchain.org",
        ],
    },
    "opbnb": {
        "prefix": "/opbnb",
        "chain_id": 204,
        "upstreams": [
            "https://opbnb-mainnet-rpc.bnbchain.org",
        ],
    },
}

DEFAULT_PLANS: dict[str, dict[str, Any]] = {
    "free": {"title": "Free", "rate": 25, "burst": 50, "weights": {"eth_getLogs": 50}},
    "payg": {"title": "Pay as you go", "rate": 300, "burst": 600, "weights": {"eth_getLogs": 50}},
}

_SECTIONS: dict[str, type[Any]] = {
    "server": ServerConfig,
    "limits": LimitsConfig,
    "redis": RedisConfig,
    "upstream": UpstreamConfig,
    "dashboard": DashboardConfig,
    "ws": WsConfig,
}
_TOP_KEYS = {*_SECTIONS, "networks", "plans", "default_plan"}


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load ``path`` (or ``$GATEWAY_CONFIG``), apply env overrides, validate."""
    env = os.environ if env is None else env
    if path is None:
        path = env.get("GATEWAY_CONFIG") or None
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return config_from_dict(raw, env)


def config_from_dict(raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Build a validated ``Config`` from parsed TOML plus env overrides."""
    env = {} if env is None else env
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown config key")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        table = dict(_table(raw, name))
        if name == "redis" and env.get("GATEWAY_REDIS_URL"):
            table["url"] = env["GATEWAY_REDIS_URL"]
        sections[name] = _build(cls, table, name)

    if sections["upstream"].client not in ("lean", "aiohttp"):
        raise ConfigError('upstream.client: must be "lean" or "aiohttp"')
    ws = sections["ws"]
    if ws.charge_interval_s <= 0:
        raise ConfigError("ws.charge_interval_s: must be above 0")
    if ws.socket_lease_s < 3:
        raise ConfigError("ws.socket_lease_s: must be at least 3")
    if ws.recheck_interval_s <= 0:
        raise ConfigError("ws.recheck_interval_s: must be above 0")
    if ws.send_queue_bytes < 4096:
        raise ConfigError("ws.send_queue_bytes: must be at least 4096")
    if ws.max_in_flight_per_socket < 1:
        raise ConfigError("ws.max_in_flight_per_socket: must be at least 1")
    for i, cidr in enumerate(sections["server"].trusted_proxies):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ConfigError(f"server.trusted_proxies[{i}]: not an IP network") from None

    nets_raw = {k: dict(v) for k, v in DEFAULT_NETWORKS.items()}
    for name, table in _table(raw, "networks").items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"networks.{name}: must be a table")
        nets_raw.setdefault(name, {}).update(table)
    for name in nets_raw:
        override = env.get(f"GATEWAY_UPSTREAM_{name.upper()}")
        if override:
            nets_raw[name]["upstreams"] = [u.strip() for u in override.split(",") if u.strip()]
        ws_override = env.get(f"GATEWAY_WS_UPSTREAM_{name.upper()}")
        if ws_override:
            urls = [u.strip() for u in ws_override.split(",") if u.strip()]
            nets_raw[name]["ws_upstreams"] = urls
    networks = tuple(_network(name, table) for name, table in nets_raw.items())
    prefixes = [n.prefix for n in networks]
    if len(set(prefixes)) != len(prefixes):
        raise ConfigError("networks: two networks share one path prefix")

    plans_raw = {k: dict(v) for k, v in DEFAULT_PLANS.items()}
    for name, table in _table(raw, "plans").items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"plans.{name}: must be a table")
        plans_raw.setdefault(name, {}).update(table)
    plans = tuple(_plan(name, table) for name, table in plans_raw.items())

    default_plan = raw.get("default_plan", "free")
    if default_plan not in plans_raw:
        raise ConfigError(f"default_plan: no plan named {default_plan!r}")
    return Config(networks=networks, plans=plans, default_plan=default_plan, **sections)


def _table(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: must be a table")
    return value


def _build(cls: type[Any], table: Mapping[str, Any], path: str) -> Any:
    """Instantiate a config dataclass, type-checking each value by its annotation."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{path}.{key}: unknown config key")
        kwargs[key] = _coerce(value, hints[key], f"{path}.{key}")
    obj = cls(**kwargs)
    for f in dataclasses.fields(cls):
        val = getattr(obj, f.name)
        if isinstance(val, int | float) and not isinstance(val, bool) and val < 0:
            raise ConfigError(f"{path}.{f.name}: must not be negative")
    return obj


def _coerce(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list")
        item = typing.get_args(hint)[0]
        return tuple(_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is types.UnionType:  # pragma: no cover - no optional fields yet
        return value
    raise ConfigError(f"{path}: unsupported value")  # pragma: no cover


def _network(name: str, table: Mapping[str, Any]) -> NetworkConfig:
    path = f"networks.{name}"
    known = {"prefix", "chain_id", "upstreams", "methods", "extra_methods", "ws_upstreams"}
    for key in table:
        if key not in known:
            raise ConfigError(f"{path}.{key}: unknown config key")
    prefix = table.get("prefix", f"/{name}")
    if (
        not isinstance(prefix, str)
        or not prefix.startswith("/")
        or prefix.endswith("/")
        or prefix.count("/") != 1
        or prefix == "/dashboard"
    ):
        raise ConfigError(f"{path}.prefix: must look like '/name' (one segment)")
    chain_id = table.get("chain_id")
    if isinstance(chain_id, bool) or not isinstance(chain_id, int) or chain_id <= 0:
        raise ConfigError(f"{path}.chain_id: expected a positive integer")
    upstreams = table.get("upstreams", [])
    if not isinstance(upstreams, list) or not upstreams:
        raise ConfigError(f"{path}.upstreams: expected a non-empty list of URLs")
    for i, url in enumerate(upstreams):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{path}.upstreams[{i}]: not an http(s) URL")
    ws_default = [_ws_url(u) for u in upstreams]
    ws_upstreams = table.get("ws_upstreams", ws_default)
    if not isinstance(ws_upstreams, list) or not ws_upstreams:
        raise ConfigError(f"{path}.ws_upstreams: expected a non-empty list of URLs")
    for i, url in enumerate(ws_upstreams):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("ws", "wss") or not parts.netloc:
            raise ConfigError(f"{path}.ws_upstreams[{i}]: not a ws(s) URL")
    methods = table.get("methods", list(DEFAULT_METHODS))
    extra = table.get("extra_methods", [])
    for key, lst in (("methods", methods), ("extra_methods", extra)):
        if not isinstance(lst, list) or not all(isinstance(m, str) for m in lst):
            raise ConfigError(f"{path}.{key}: expected a list of method names")
    allowed = frozenset(methods) | frozenset(extra)
    for method in sorted(allowed):
        if method.startswith(FORBIDDEN_METHOD_PREFIXES):
            raise ConfigError(f"{path}.methods: {method!r} may never be offered publicly")
    return NetworkConfig(
        name=name,
        prefix=prefix,
        chain_id=chain_id,
        upstreams=tuple(upstreams),
        methods=allowed,
        ws_upstreams=tuple(ws_upstreams),
    )


def _ws_url(url: str) -> str:
    """An http(s) node URL with the matching ws(s) scheme."""
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    return "ws://" + url[len("http://") :]


def _plan(name: str, table: Mapping[str, Any]) -> PlanConfig:
    path = f"plans.{name}"
    known = {"title", "rate", "burst", "daily_quota", "weights"}
    known |= {"ws_max_sockets", "ws_max_subscriptions"}
    for key in table:
        if key not in known:
            raise ConfigError(f"{path}.{key}: unknown config key")
    if not name.isidentifier():
        raise ConfigError(f"{path}: plan names must be identifiers")
    rate = table.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or rate <= 0:
        raise ConfigError(f"{path}.rate: expected a positive number (requests per second)")
    burst = table.get("burst", int(rate) * 2)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ConfigError(f"{path}.burst: expected a positive integer")
    quota = table.get("daily_quota", 0)
    if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
        raise ConfigError(f"{path}.daily_quota: expected a non-negative integer (0 = none)")
    weights = table.get("weights", {})
    if not isinstance(weights, Mapping):
        raise ConfigError(f"{path}.weights: expected a table of method = units")
    for method, units in weights.items():
        if isinstance(units, bool) or not isinstance(units, int) or units < 0:
            raise ConfigError(f"{path}.weights.{method}: expected a non-negative integer")
    ws_caps = {}
    for cap in ("ws_max_sockets", "ws_max_subscriptions"):
        value = table.get(cap, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{path}.{cap}: expected a non-negative integer (0 = [ws] default)")
        ws_caps[cap] = value
    title = table.get("title", name.title())
    if not isinstance(title, str):
        raise ConfigError(f"{path}.title: expected a string")
    return PlanConfig(
        name=name,
        title=title,
        rate=float(rate),
        burst=burst,
        daily_quota=quota,
        weights=types.MappingProxyType(dict(weights)),
        **ws_caps,
    )


def data_dir(cfg: Config) -> Path:
    return Path(cfg.redis.data_dir).expanduser()
