"""The node table: ``upstreams`` entries as URLs or tables, and where heavy methods go.

An ``upstreams`` entry is a URL (``"https://node.example"``) or a table
``{ url, name, ws_url, archive, state_blocks, max_logs_range, groups }``
(every field but ``url`` optional). ``name`` is what logs, metrics and the
``X-Gateway-Node`` header show, so it is checked to be a short word and never
a URL (a provider's URL often carries its key). An ``extra_methods`` entry
may be a table ``{ weight, group, timeout_s }``: the method reaches only the
nodes whose ``groups`` hold ``group``, under its own timeout. Every mistake
names its config path (``networks.bsc.upstreams[1].state_blocks``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from gateway.config.nodeshape import MethodRoute, NodeConfig
from gateway.config.schema import ConfigError, NetworkConfig

_NODE_KEYS: Final = ("url", "name", "ws_url", "archive", "state_blocks", "max_logs_range", "groups")
_ROUTE_KEYS: Final = ("weight", "group", "timeout_s")
# A node's or a group's name: a short word, so a log line or a header never holds a URL.
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# X-Gateway-Node values that say no node answered: no node may be named so.
_RESERVED: Final = frozenset({"cache", "gateway"})


def _is_url(value: Any, scheme: str) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (a port past 65535 raises ValueError)
    except ValueError:
        return False
    return parts.scheme in (scheme, scheme + "s") and bool(parts.netloc)


def read_nodes(entries: Any, path: str, network: str) -> tuple[NodeConfig, ...]:
    """The nodes of ``networks.<network>.upstreams`` (``path``); ConfigError names the entry."""
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty list of URLs or node tables")
    nodes: list[NodeConfig] = []
    names: dict[str, int] = {}
    urls: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        if isinstance(entry, Mapping):
            node = _node_table(entry, where, f"{network}-{i}")
        elif _is_url(entry, "http"):
            node = NodeConfig(url=entry, name=f"{network}-{i}")
        elif isinstance(entry, str):
            raise ConfigError(f"{where}: not an http(s) URL")
        else:
            raise ConfigError(
                f'{where}: expected an http(s) URL or a node table {{ url = "https://...", '
                'name = "..." }'
            )
        if node.name in names:
            raise ConfigError(
                f"{where}.name: {node.name!r} is also the name of {path}[{names[node.name]}] "
                "(names tell nodes apart in logs, metrics and X-Gateway-Node)"
            )
        names[node.name] = i
        same = normal_url(node.url)
        if same in urls:
            # One node twice would be two votes for its word (its finalized
            # mark, its head): the message names both paths, never the URL,
            # which may hold a provider's key.
            raise ConfigError(
                f"{where}.url: the same node as {path}[{urls[same]}] (URLs equal once "
                "normalised: case of scheme and host, default port, trailing slash)"
            )
        urls[same] = i
        nodes.append(node)
    return tuple(nodes)


def normal_url(url: str) -> str:
    """``url`` as one node: scheme and host lower-cased, default port and trailing slash dropped."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        netloc = host
    else:
        netloc = f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
    path = parts.path.rstrip("/")
    return f"{scheme}://{netloc}{path}?{parts.query}"


def _node_table(table: Mapping[str, Any], where: str, default_name: str) -> NodeConfig:
    for key in table:
        if key not in _NODE_KEYS:
            raise ConfigError(
                f"{where}.{key}: unknown config key (a node table takes {', '.join(_NODE_KEYS)})"
            )
    url = table.get("url")
    if url is None:
        raise ConfigError(f"{where}.url: missing (every node table needs its http(s) URL)")
    if not _is_url(url, "http"):
        raise ConfigError(f"{where}.url: not an http(s) URL")
    name = table.get("name", default_name)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where}.name: expected a short name of letters, digits, '.', '_' or '-' "
            "(at most 64; it is shown in logs, metrics and X-Gateway-Node, so never a URL)"
        )
    if name in _RESERVED:
        raise ConfigError(
            f"{where}.name: {name!r} is reserved (X-Gateway-Node says it when no node answered)"
        )
    ws_url = table.get("ws_url", "")
    if ws_url != "" and not _is_url(ws_url, "ws"):
        raise ConfigError(f"{where}.ws_url: not a ws(s) URL")
    archive = table.get("archive", False)
    if not isinstance(archive, bool):
        raise ConfigError(f"{where}.archive: expected true or false")
    state_blocks = table.get("state_blocks", 128)
    if isinstance(state_blocks, bool) or not isinstance(state_blocks, int) or state_blocks < 1:
        raise ConfigError(
            f"{where}.state_blocks: expected a positive integer (recent blocks whose state "
            "the node keeps; geth's default is 128; or set archive = true)"
        )
    logs_range = table.get("max_logs_range", 0)
    if isinstance(logs_range, bool) or not isinstance(logs_range, int) or logs_range < 0:
        raise ConfigError(
            f"{where}.max_logs_range: expected a non-negative integer (blocks per eth_getLogs "
            "the node takes; 0 = no known limit)"
        )
    groups = table.get("groups", [])
    if not isinstance(groups, list):
        raise ConfigError(f'{where}.groups: expected a list of group names (["trace"])')
    for j, group in enumerate(groups):
        if not isinstance(group, str) or not _NAME.match(group):
            raise ConfigError(f"{where}.groups[{j}]: expected a short group name")
    return NodeConfig(
        url=url,
        name=name,
        ws_url=ws_url,
        archive=archive,
        state_blocks=state_blocks,
        max_logs_range=logs_range,
        groups=tuple(groups),
    )


def read_routes(extra: Any, path: str, nodes: tuple[NodeConfig, ...]) -> dict[str, MethodRoute]:
    """``extra_methods`` entries written as tables: their group and timeout, by name or pattern.

    The weight of such an entry is read with the other weights (config/methods.py).
    """
    routes: dict[str, MethodRoute] = {}
    if not isinstance(extra, Mapping):
        return routes
    groups = {g for node in nodes for g in node.groups}
    for method, entry in extra.items():
        if not isinstance(entry, Mapping):
            continue  # a plain weight
        where = f"{path}.extra_methods.{method}"
        for key in entry:
            if key not in _ROUTE_KEYS:
                raise ConfigError(
                    f"{where}.{key}: unknown config key (an entry takes weight, group, timeout_s)"
                )
        weight = entry.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise ConfigError(f"{where}.weight: expected a non-negative integer (compute units)")
        group = entry.get("group", "")
        if not isinstance(group, str) or (group and not _NAME.match(group)):
            raise ConfigError(f"{where}.group: expected a short group name")
        if group and group not in groups:
            raise ConfigError(
                f"{where}.group: no node of {path}.upstreams has groups = [{group!r}], "
                "so the method could reach no node"
            )
        timeout = entry.get("timeout_s", 0.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ConfigError(
                f"{where}.timeout_s: expected a positive number of seconds "
                "(0 = limits.upstream_timeout_s)"
            )
        routes[method] = MethodRoute(group=group, timeout_s=float(timeout))
    return routes


def node_table(network: NetworkConfig) -> tuple[NodeConfig, ...]:
    """The network's nodes; plain ones for ``upstreams`` replaced or built without a table.

    (The demo puts its own node in ``upstreams``; tests build ``NetworkConfig``
    from URLs.) Such a node is named ``<network>-<index>`` with the defaults.
    """
    nodes = network.nodes
    if tuple(n.url for n in nodes) == network.upstreams:
        return nodes
    return tuple(NodeConfig(u, f"{network.name}-{i}") for i, u in enumerate(network.upstreams))


def network_raw(network: NetworkConfig, raw: dict[str, Any]) -> None:
    """Put the node table and method routes of ``raw`` (a loaded network) back in TOML shape.

    Worker processes load the parent's config again from its TOML shape
    (``server.workers.config_to_raw``): nodes as tables, routes as
    ``extra_methods`` tables (the methods themselves are in ``methods``).
    """
    raw.pop("nodes", None)
    raw.pop("routes", None)
    raw.pop("builders", None)  # the private_tx tables (config/txconfig.py)
    raw["private_tx"] = [
        {k: v for k, v in dataclasses.asdict(b).items() if v} for b in network.builders
    ]
    raw["upstreams"] = [
        {**dataclasses.asdict(node), "groups": list(node.groups)} for node in node_table(network)
    ]
    raw["extra_methods"] = {
        method: {"group": route.group, "timeout_s": route.timeout_s}
        for method, route in network.routes.items()
    }
