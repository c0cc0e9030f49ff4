"""``gateway config check [FILE]``: every mistake in a config at once, each with its path.

The loader (``gateway.config.load``) stops at the first mistake, which is
what a starting server wants. An operator fixing a file wants the whole
list, so this runs the same loader again and again: after each mistake it
takes out the setting the message names (or, when the same path fails
again, the table around it; environment overrides such as
``GATEWAY_REDIS_URL`` count as settings too) and loads again, until the
file loads or nothing more can be taken out. No second validator exists,
so the check can never disagree with ``gateway serve``. A mistake that only
shows once another is fixed (a value checked against one that was itself
wrong) appears on the next run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from gateway.config import Config, ConfigError, config_from_dict, read_toml

_MAX_ROUNDS = 200  # far more settings than a config has; a guard against a loop
# Environment variables the loader reads, by the config path they set.
_ENV_FOR = {("redis", "url"): "GATEWAY_REDIS_URL"}
_ENV_PREFIXES = {"upstreams": "GATEWAY_UPSTREAM_", "ws_upstreams": "GATEWAY_WS_UPSTREAM_"}


def check(
    path: str | None, env: Mapping[str, str] | None = None
) -> tuple[Config | None, list[str]]:
    """(the config if it loads, every problem found); ``path`` None reads $GATEWAY_CONFIG."""
    env = dict(os.environ if env is None else env)
    path = path or env.get("GATEWAY_CONFIG") or None
    try:
        raw: dict[str, Any] = {} if path is None else read_toml(path)
    except ConfigError as exc:
        return None, [str(exc)]
    problems: list[str] = []
    seen: dict[str, int] = {}
    first: Config | None = None
    for _ in range(_MAX_ROUNDS):
        try:
            cfg = config_from_dict(raw, env)
        except ConfigError as exc:
            message = str(exc)
            where = message.split(": ", 1)[0].split(" (", 1)[0]
            if where not in seen:
                problems.append(message)
            seen[where] = seen.get(where, 0) + 1
            if not _take_out(raw, env, _parts(where), seen[where] - 1):
                break
            continue
        first = cfg if not problems else None
        break
    return first, problems


def _parts(where: str) -> list[str]:
    """``networks.bsc.upstreams[0]`` -> ``["networks", "bsc", "upstreams"]``."""
    return [re.sub(r"\[\d+\]$", "", p) for p in where.split(".") if p]


def _take_out(raw: dict[str, Any], env: dict[str, str], parts: list[str], up: int) -> bool:
    """Remove the setting at ``parts`` (``up`` levels higher); False if nothing was there."""
    removed = False
    if len(parts) >= 2:
        var = _ENV_FOR.get((parts[0], parts[1]))
        if parts[0] == "networks" and len(parts) >= 3 and parts[2] in _ENV_PREFIXES:
            var = _ENV_PREFIXES[parts[2]] + parts[1].upper()
        if var and env.pop(var, None) is not None:
            removed = True
    keep = max(1, len(parts) - up)
    for depth in range(min(keep, len(parts)), 0, -1):
        table: Any = raw
        for key in parts[: depth - 1]:
            table = table.get(key) if isinstance(table, dict) else None
        if isinstance(table, dict) and parts[depth - 1] in table:
            del table[parts[depth - 1]]
            return True
    return removed
