"""Loading in stages: read TOML, apply env, reject unknown keys, apply defaults, validate.

Every mistake is reported with the config path that caused it, e.g.
``networks.bsc.upstreams[0]: not an http(s) URL``, so an operator can find it.

It stays whole because every section goes through the same stages (the
``SECTIONS`` table, env, unknown keys, defaults, validation) and reports with
the same config path, so a check added in one place reads like its neighbours.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

from gateway.config.addresses import listen_address
from gateway.config.adminload import admin_from_raw
from gateway.config.alerts import alerts_problem
from gateway.config.defaults import DEFAULT_NETWORKS, DEFAULT_PLANS, DEFAULT_WEIGHTS
from gateway.config.listening import FiltersConfig
from gateway.config.methods import NEVER_FREE, ExtraWeights, merge_weights, network_methods
from gateway.config.nodes import read_nodes, read_routes
from gateway.config.schema import (
    CacheConfig,
    Config,
    ConfigError,
    HedgeConfig,
    NetworkConfig,
    PlanConfig,
)
from gateway.config.txconfig import NETWORK_KEYS, network_tx, non_negative, plan_tx

# The TOML sections: every field of Config that holds a section dataclass, in
# Config's order (networks, plans: tables of tables, read below; admin: adminload).
SECTIONS: dict[str, type[Any]] = {
    name: hint
    for name, hint in typing.get_type_hints(Config).items()
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and name != "admin"
}
_TOP_KEYS = {*SECTIONS, "admin", "networks", "plans", "default_plan"}


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load ``path`` (or ``$GATEWAY_CONFIG``), apply env overrides, validate."""
    env = os.environ if env is None else env
    if path is None:
        path = env.get("GATEWAY_CONFIG") or None
    return config_from_dict({} if path is None else read_toml(path), env)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed file; a missing, unreadable-as-file or invalid one is a ``ConfigError``."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def config_from_dict(raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Build a validated ``Config`` from parsed TOML plus env overrides."""
    env = {} if env is None else env
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown config key")
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        table = dict(_table(raw, name))
        if name == "redis" and env.get("GATEWAY_REDIS_URL"):
            table["url"] = env["GATEWAY_REDIS_URL"]
        if name == "log" and env.get("GATEWAY_LOG_FORMAT"):
            table["format"] = env["GATEWAY_LOG_FORMAT"]
        if name == "server" and env.get("GATEWAY_SERVER_DOOR"):
            table["door"] = env["GATEWAY_SERVER_DOOR"]
        if name == "server" and env.get("GATEWAY_READY_REQUIRES"):
            table["ready_requires"] = [
                r.strip() for r in env["GATEWAY_READY_REQUIRES"].split(",") if r.strip()
            ]
        sections[name] = _build(cls, table, name)

    _check_redis_url(sections["redis"].url, from_env=bool(env.get("GATEWAY_REDIS_URL")))
    if sections["log"].format not in ("text", "json"):
        raise ConfigError('log.format: must be "text" or "json"')
    upstream = sections["upstream"]
    low, high = upstream.ws_reconnect_min_s, upstream.ws_reconnect_max_s
    if low <= 0 or high < low:
        raise ConfigError(
            "upstream.ws_reconnect_min_s: must be above 0 and at most ws_reconnect_max_s"
        )
    if upstream.logs_max_chunks < 1:
        raise ConfigError(
            "upstream.logs_max_chunks: must be at least 1 (node calls per eth_getLogs)"
        )
    if sections["server"].door not in ("app", "lean"):
        raise ConfigError('server.door: must be "app" or "lean"')
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
    head = sections["head"]
    if head.max_mismatches < 1 or head.quorum < 0 or head.solo_lead < 0:
        raise ConfigError("head: max_mismatches must be at least 1, quorum and solo_lead 0 or more")
    _floor("head.stale_s", head.stale_s, 0)
    _floor("head.clock_skew_s", head.clock_skew_s, 0)
    _floor("head.inconsistent_cooldown_s", head.inconsistent_cooldown_s, 0, above=True)
    _check_filters(sections["filters"])
    if (problem := alerts_problem(sections["alerts"])) is not None:
        raise ConfigError(problem)
    _floor("limits.max_inflate_ratio", sections["limits"].max_inflate_ratio, 1)
    _floor("server.refused_linger_s", sections["server"].refused_linger_s, 0)
    if sections["insight"].interval_s <= 0 or sections["insight"].log_cap < 1:
        raise ConfigError("insight: interval_s must be positive and log_cap at least 1")
    ws = sections["ws"]
    _floor("ws.charge_interval_s", ws.charge_interval_s, 0, above=True)
    _floor("ws.socket_lease_s", ws.socket_lease_s, 3)
    _floor("ws.recheck_interval_s", ws.recheck_interval_s, 0, above=True)
    _floor("ws.send_queue_bytes", ws.send_queue_bytes, 4096)
    _floor("ws.max_in_flight_per_socket", ws.max_in_flight_per_socket, 1)
    if not 0 <= sections["server"].port <= 65535:
        raise ConfigError("server.port: must be a TCP port, 0 to 65535")
    _floor("server.workers", sections["server"].workers, 1)
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

    nets_raw = _over_defaults(raw, "networks", DEFAULT_NETWORKS)
    for name in nets_raw:
        override = env.get(f"GATEWAY_UPSTREAM_{name.upper()}")
        if override:
            nets_raw[name]["upstreams"] = [u.strip() for u in override.split(",") if u.strip()]
        ws_override = env.get(f"GATEWAY_WS_UPSTREAM_{name.upper()}")
        if ws_override:
            urls = [u.strip() for u in ws_override.split(",") if u.strip()]
            nets_raw[name]["ws_upstreams"] = urls
    extra_weights = ExtraWeights()
    networks = tuple(_network(name, table, extra_weights) for name, table in nets_raw.items())
    prefixes = [n.prefix for n in networks]
    if len(set(prefixes)) != len(prefixes):
        raise ConfigError("networks: two networks share one path prefix")

    _check_ready_requires(sections["server"].ready_requires, {n.name for n in networks})

    plans_raw = _over_defaults(raw, "plans", DEFAULT_PLANS)
    plans = tuple(_plan(name, table, extra_weights) for name, table in plans_raw.items())

    default_plan = raw.get("default_plan", "free")
    if default_plan not in plans_raw:
        raise ConfigError(f"default_plan: no plan named {default_plan!r}")
    sections["admin"] = admin_from_raw(raw.get("admin"))
    return Config(networks=networks, plans=plans, default_plan=default_plan, **sections)


def _check_ready_requires(requires: tuple[str, ...], networks: set[str]) -> None:
    for i, item in enumerate(requires):
        if item not in ("redis", "any_network", "all_networks") and item not in networks:
            raise ConfigError(
                f"server.ready_requires[{i}]: {item!r} is not redis, any_network, "
                "all_networks or a network's name"
            )


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
    _floor("hedge.window", hedge.window, 1)


def _check_filters(filters: FiltersConfig) -> None:
    _floor("filters.ttl_s", filters.ttl_s, 0, above=True)
    _floor("filters.max_blocks_per_poll", filters.max_blocks_per_poll, 1)
    _floor("filters.reorg_polls", filters.reorg_polls, 1)
    _floor("filters.max_poll_bytes", filters.max_poll_bytes, 4096)
    _floor("filters.max_topic_alternatives", filters.max_topic_alternatives, 1)
    _floor("filters.max_filter_bytes", filters.max_filter_bytes, 1024)
    if filters.max_key_bytes < filters.max_filter_bytes:
        raise ConfigError("filters.max_key_bytes: must be at least filters.max_filter_bytes")


def _floor(path: str, value: float, low: int, *, above: bool = False) -> None:
    """Refuse a value under its floor (``above``: at or under it), naming its config path."""
    if value <= low if above else value < low:
        raise ConfigError(f"{path}: must be {'above' if above else 'at least'} {low}")


def _over_defaults(
    raw: Mapping[str, Any], name: str, defaults: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The ``[name.*]`` tables laid over the shipped ones, key by key (validated later)."""
    merged = {k: dict(v) for k, v in defaults.items()}
    for entry, table in _table(raw, name).items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{name}.{entry}: must be a table")
        merged.setdefault(entry, {}).update(table)
    return merged


def _table(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: must be a table")
    return value


# Keys a release removed, refused with what replaced them so an old file is
# not read as meaning something it no longer does.
_REMOVED = {
    "head.rate_slack_blocks": (
        "removed: no rule judges a node's speed any more (a node catching up runs "
        "fast and is right); delete the key"
    ),
    "head.max_lead": (
        "removed: no lead takes a node out any more; head.solo_lead (default 1) "
        "bounds how far one node may lead the block the nodes agree on"
    ),
}


def _build(cls: type[Any], table: Mapping[str, Any], path: str) -> Any:
    """Instantiate a config dataclass, type-checking each value by its annotation."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            gone = _REMOVED.get(f"{path}.{key}")
            raise ConfigError(f"{path}.{key}: {gone or 'unknown config key'}")
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


def _network(name: str, table: Mapping[str, Any], extra_weights: ExtraWeights) -> NetworkConfig:
    path = f"networks.{name}"
    known = {"prefix", "chain_id", "upstreams", "methods", "extra_methods", "ws_upstreams"}
    known |= NETWORK_KEYS
    known.add("block_time_s")
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
    nodes = read_nodes(table.get("upstreams", []), f"{path}.upstreams", name)
    ws_default = [n.ws_url or ws_url_for(n.url) for n in nodes]
    ws_upstreams = _url_list(table.get("ws_upstreams", ws_default), f"{path}.ws_upstreams", "ws")
    routes = read_routes(table.get("extra_methods", []), path, nodes)
    methods = network_methods(path, table, chain_id, extra_weights)
    block_time = non_negative(table, "block_time_s", 0.0, path, " (seconds, 0 = no check)")
    return NetworkConfig(
        name=name,
        prefix=prefix,
        chain_id=chain_id,
        upstreams=tuple(n.url for n in nodes),
        methods=methods,
        ws_upstreams=tuple(ws_upstreams),
        nodes=nodes,
        routes=types.MappingProxyType(routes),
        **network_tx(path, table),
        block_time_s=block_time,
    )


def _check_redis_url(url: str, *, from_env: bool) -> None:
    """What redis-py accepts, checked here so a typo is one clear line (never echoing it)."""
    if not url:
        return
    where = "redis.url (from GATEWAY_REDIS_URL)" if from_env else "redis.url"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise ConfigError(f"{where}: not a URL") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{where}: expected a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{where}: no host (redis://host:6379/0)")


def _url_list(urls: Any, where: str, scheme: str) -> list[str]:
    """A non-empty list of ``scheme`` or ``scheme``-s URLs (http(s), ws(s)), each with a host."""
    if not isinstance(urls, list) or not urls:
        raise ConfigError(f"{where}: expected a non-empty list of URLs")
    for i, url in enumerate(urls):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in (scheme, scheme + "s") or not _has_port(parts):
            article = "an" if scheme == "http" else "a"  # the messages' words as before
            raise ConfigError(f"{where}[{i}]: not {article} {scheme}(s) URL")
    return urls


def _has_port(parts: SplitResult) -> bool:
    """A host, and a port in 0-65535 if one is written (``urlsplit`` reads it lazily)."""
    try:
        parts.port  # noqa: B018 (raises ValueError on a port out of range)
    except ValueError:
        return False
    return bool(parts.netloc)


def ws_url_for(url: str) -> str:
    """An http(s) node URL with the matching ws(s) scheme (the default ``ws_upstreams``)."""
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    return "ws://" + url[len("http://") :]


def _plan(name: str, table: Mapping[str, Any], extra_weights: ExtraWeights) -> PlanConfig:
    path = f"plans.{name}"
    # a plan's keys: its fields, but its name (the table's) and weight_patterns (derived)
    known = {f.name for f in dataclasses.fields(PlanConfig)} - {"name", "weight_patterns"}
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
        if units < 1 and method in NEVER_FREE:
            raise ConfigError(f"{path}.weights.{method}: a log scan is never free (at least 1)")
    merged = merge_weights(DEFAULT_WEIGHTS, extra_weights.weights, weights)
    patterns = sorted(
        ((m[:-1], u) for m, u in merged.items() if m.endswith("*")), key=lambda p: -len(p[0])
    )
    logs_range = table.get("max_logs_range", 0)
    if isinstance(logs_range, bool) or not isinstance(logs_range, int) or logs_range < 0:
        raise ConfigError(f"{path}.max_logs_range: expected a non-negative integer (0 = default)")
    ws_caps: dict[str, Any] = {}
    for cap in ("ws_max_sockets", "ws_max_subscriptions"):
        value = table.get(cap, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{path}.{cap}: expected a non-negative integer (0 = [ws] default)")
        ws_caps[cap] = value
    title = table.get("title", name.title())
    if not isinstance(title, str):
        raise ConfigError(f"{path}.title: expected a string")
    price = non_negative(table, "price_per_million_cu", 0, path, " (0 = free)")
    wait = table.get("max_wait_s")  # None (unset): limits.max_wait_s
    if wait is not None:
        wait = non_negative(table, "max_wait_s", 0, path, " (0 = never wait)")
    return PlanConfig(
        name=name,
        title=title,
        rate=float(rate),
        burst=burst,
        daily_quota=quota,
        weights=types.MappingProxyType(merged),  # "prefix*" keys never match a name
        weight_patterns=tuple(patterns),
        max_logs_range=logs_range,
        price_per_million_cu=price,
        max_wait_s=wait,
        **plan_tx(path, table),
        **ws_caps,
    )
