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
    # An answer the client leaves unread (the socket's write buffer stays
    # full) for this long drops the connection; 0 turns the check off.
    write_timeout_s: float = 30.0
    # /metrics is served here, never on the public port; "" turns it off.
    # With several workers one of them holds it at a time (gateway/server.py).
    metrics_listen: str = "127.0.0.1:9464"
    # `serve --workers`: a worker that dies is restarted after this delay,
    # doubled for each quick death in a row, at most restart_backoff_max_s.
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    # SIGHUP: new workers get this long to listen before the old ones drain anyway.
    worker_ready_timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_body_bytes: int = 1_048_576
    max_batch: int = 100
    max_json_depth: int = 64
    upstream_connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 10.0
    max_in_flight: int = 2_048
    # eth_getLogs block ranges (to - from + 1) above this answer -32602 before
    # any node sees them; a plan's own max_logs_range overrides it; 0 = none.
    max_logs_range: int = 10_000
    # A node's answer above this is refused (502); larger ones are streamed.
    max_response_bytes: int = 256 * 1024 * 1024


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
    # Hot-path Redis failures: at most one log line per this many seconds.
    failure_log_interval_s: float = 10.0


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    name: str
    prefix: str
    chain_id: int
    upstreams: tuple[str, ...]
    methods: frozenset[str]


@dataclass(frozen=True, slots=True)
class PlanConfig:
    name: str
    title: str
    rate: float  # sustained compute units per second
    burst: int  # bucket size
    daily_quota: int = 0  # compute units per UTC day, 0 = none
    weights: Mapping[str, int] = field(default_factory=dict)
    max_logs_range: int = 0  # 0 = limits.max_logs_range
    # Price shown as the estimated cost (compute units x price / 1e6); 0 = free.
    price_per_million_cu: float = 0.0

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
class CacheConfig:
    """The finality-aware answer cache and request coalescing (gateway/intel)."""

    enabled: bool = True
    max_bytes: int = 64 * 1024 * 1024  # per network per worker, keys + answers + overhead
    max_entry_bytes: int = 1024 * 1024  # one answer above this is not cached
    coalesce: bool = True  # identical concurrent reads share one node call
    # Optional shared tier in Redis for answers that can never change (final).
    # Off by default: a lookup is a second Redis round trip on a local miss.
    redis: bool = False
    redis_ttl_s: float = 3600.0
    redis_max_bytes: int = 256 * 1024 * 1024  # bytes written within one TTL, all workers
    redis_max_entry_bytes: int = 256 * 1024


@dataclass(frozen=True, slots=True)
class HedgeConfig:
    """Hedged reads: a second node is asked when the first is slower than its p95."""

    enabled: bool = True
    floor_s: float = 0.05  # never hedge sooner than this
    ceiling_s: float = 0.5  # never wait longer than this (also the delay before samples)
    percentile: float = 0.95
    window: int = 64  # recent latencies kept per node


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    enabled: bool = True
    session_max_age_s: int = 7 * 24 * 3600
    secure_cookies: bool = False
    public_url: str = ""  # shown in endpoint examples; empty = from the request
    # Account security (gateway/security_store.py, dashboard/account_security.py).
    reset_link_ttl_s: int = 3600  # `gateway accounts reset-password` links work this long, once
    login_code_ttl_s: int = 300  # time to type the two-step code after the password
    login_code_attempts: int = 5  # wrong codes per password entry before starting over
    recovery_codes: int = 10  # recovery codes issued when two-step log-in is turned on
    session_seen_interval_s: int = 60  # "last seen" of a session is written at most this often
    max_sessions_per_account: int = 50  # a log-in past this ends the account's oldest session
    max_keys_per_account: int = 20  # keys still in a rotation grace period count
    # Revoked and expired key records are deleted this long after they stop
    # working, and an account keeps at most max_inactive_keys of them (oldest
    # go first): records never pile up and the keys page stays small.
    inactive_key_retention_s: int = 30 * 86_400
    max_inactive_keys: int = 20
    # Log-in throttle, counted BEFORE the password is checked (fixed windows).
    # Per (email, client IP) and per client IP (IPv6 grouped by /64), plus a
    # looser per-email ceiling against slow guessing from many addresses; an
    # (email, IP) pair that logged in within login_remember_s skips that
    # ceiling, so strangers cannot lock the owner out.
    login_window_s: int = 900
    login_per_email_ip: int = 5
    login_per_ip: int = 20
    login_email_window_s: int = 3_600
    login_per_email: int = 30
    login_remember_s: int = 30 * 86_400
    signup_window_s: int = 3_600
    signup_per_ip: int = 10  # each sign-up costs an argon2 hash
    # argon2 runs in this many threads at most, off the event loop; a log-in
    # that waits longer than password_hash_wait_s for one answers 503.
    password_hash_threads: int = 2
    password_hash_wait_s: float = 5.0


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """How requests are admitted (SPEC §5 "Scale rules"; gateway.limits.leasing).

    ``lease``: each worker leases slices of a key's bucket and admits locally,
    caches key records (pub/sub invalidation) and flushes usage each
    ``usage_flush_s``; about one Redis call per slice instead of per request.
    ``exact``: one admission script call per request (admit.lua).
    """

    mode: str = "lease"
    key_ttl_s: float = 5.0  # cached key records are re-read at least this often
    lease_horizon_s: float = 0.05  # a slice covers this much of a key's recent rate
    max_slice: int = 1000  # units a lease may add beyond the request's own cost
    lease_idle_s: float = 0.25  # unused leased units go back after this long unused
    usage_flush_s: float = 1.0  # usage counters summed in-process are written this often


@dataclass(frozen=True, slots=True)
class InsightConfig:
    """Request insight per key (gateway/insight.py): summed in each worker, flushed."""

    enabled: bool = True
    interval_s: float = 1.0  # a worker writes its sums this often (a crash loses at most this)
    log_cap: int = 200  # failed or rate-limited calls kept per key (the Requests page)
    log_ttl_s: int = 7 * 24 * 3600  # a key's call log is dropped this long after its last entry
    max_keys: int = 10_000  # distinct keys summed per worker between flushes; more are dropped


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = ServerConfig()
    limits: LimitsConfig = LimitsConfig()
    redis: RedisConfig = RedisConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    dashboard: DashboardConfig = DashboardConfig()
    cache: CacheConfig = CacheConfig()
    hedge: HedgeConfig = HedgeConfig()
    insight: InsightConfig = InsightConfig()
    admission: AdmissionConfig = AdmissionConfig()
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

    def max_logs_range(self, plan: str) -> int:
        """The eth_getLogs range limit of ``plan`` (0 = none)."""
        for p in self.plans:
            if p.name == plan and p.max_logs_range:
                return p.max_logs_range
        return self.limits.max_logs_range


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
    "payg": {
        "title": "Pay as you go",
        "rate": 300,
        "burst": 600,
        "weights": {"eth_getLogs": 50},
        "price_per_million_cu": 0.5,
    },
}

_SECTIONS: dict[str, type[Any]] = {
    "server": ServerConfig,
    "limits": LimitsConfig,
    "redis": RedisConfig,
    "upstream": UpstreamConfig,
    "dashboard": DashboardConfig,
    "cache": CacheConfig,
    "hedge": HedgeConfig,
    "insight": InsightConfig,
    "admission": AdmissionConfig,
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
    admission = sections["admission"]
    if admission.mode not in ("lease", "exact"):
        raise ConfigError('admission.mode: must be "lease" or "exact"')
    if min(admission.key_ttl_s, admission.lease_idle_s, admission.usage_flush_s) <= 0:
        raise ConfigError("admission: key_ttl_s, lease_idle_s and usage_flush_s must be positive")
    if admission.max_slice < 0 or admission.lease_horizon_s < 0:
        raise ConfigError("admission: max_slice and lease_horizon_s must not be negative")
    _check_intel(sections["cache"], sections["hedge"])
    if sections["insight"].interval_s <= 0 or sections["insight"].log_cap < 1:
        raise ConfigError("insight: interval_s must be positive and log_cap at least 1")
    for i, cidr in enumerate(sections["server"].trusted_proxies):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ConfigError(f"server.trusted_proxies[{i}]: not an IP network") from None
    if (
        sections["server"].metrics_listen
        and listen_address(sections["server"].metrics_listen) is None
    ):
        raise ConfigError('server.metrics_listen: expected "host:port" (or "" for none)')

    nets_raw = {k: dict(v) for k, v in DEFAULT_NETWORKS.items()}
    for name, table in _table(raw, "networks").items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"networks.{name}: must be a table")
        nets_raw.setdefault(name, {}).update(table)
    for name in nets_raw:
        override = env.get(f"GATEWAY_UPSTREAM_{name.upper()}")
        if override:
            nets_raw[name]["upstreams"] = [u.strip() for u in override.split(",") if u.strip()]
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


def _check_intel(cache: CacheConfig, hedge: HedgeConfig) -> None:
    if cache.max_entry_bytes > cache.max_bytes:
        raise ConfigError("cache.max_entry_bytes: must not exceed cache.max_bytes")
    if cache.redis_max_entry_bytes > cache.redis_max_bytes:
        raise ConfigError("cache.redis_max_entry_bytes: must not exceed cache.redis_max_bytes")
    if cache.redis and cache.redis_ttl_s <= 0:
        raise ConfigError("cache.redis_ttl_s: must be positive")
    if hedge.ceiling_s < hedge.floor_s:
        raise ConfigError("hedge.ceiling_s: must not be below hedge.floor_s")
    if not 0.0 < hedge.percentile <= 1.0:
        raise ConfigError("hedge.percentile: must be in (0, 1]")
    if hedge.window < 1:
        raise ConfigError("hedge.window: must be at least 1")


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
    known = {"prefix", "chain_id", "upstreams", "methods", "extra_methods"}
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
        name=name, prefix=prefix, chain_id=chain_id, upstreams=tuple(upstreams), methods=allowed
    )


def _plan(name: str, table: Mapping[str, Any]) -> PlanConfig:
    path = f"plans.{name}"
    known = {
        "title",
        "rate",
        "burst",
        "daily_quota",
        "weights",
        "max_logs_range",
        "price_per_million_cu",
    }
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
    logs_range = table.get("max_logs_range", 0)
    if isinstance(logs_range, bool) or not isinstance(logs_range, int) or logs_range < 0:
        raise ConfigError(f"{path}.max_logs_range: expected a non-negative integer (0 = default)")
    title = table.get("title", name.title())
    if not isinstance(title, str):
        raise ConfigError(f"{path}.title: expected a string")
    price = table.get("price_per_million_cu", 0)
    if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
        raise ConfigError(f"{path}.price_per_million_cu: expected a non-negative number (0 = free)")
    return PlanConfig(
        name=name,
        title=title,
        rate=float(rate),
        burst=burst,
        daily_quota=quota,
        weights=types.MappingProxyType(dict(weights)),
        max_logs_range=logs_range,
        price_per_million_cu=float(price),
    )


def listen_address(text: str) -> tuple[str, int] | None:
    """``"127.0.0.1:9464"`` / ``"[::1]:9464"`` -> (host, port); None when malformed."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host, int(port)


def data_dir(cfg: Config) -> Path:
    return Path(cfg.redis.data_dir).expanduser()
