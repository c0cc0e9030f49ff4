"""``gateway config check [FILE]``: every mistake in a config at once, each with its path.

The loader (``gateway.config.load``) stops at the first mistake, which is
what a starting server wants. An operator fixing a file wants the whole
list, so this runs the same loader again and again: after each mistake it
takes out the setting the message names (or, when the same path fails
again, the table around it; environment overrides such as
``GATEWAY_REDIS_URL`` count as settings too) and loads again, until the
file loads or nothing more can be taken out. No second validator exists,
so the check can never disagree with ``gateway serve``. In a list, a bad
entry is taken out alone (and the ones after it keep their place in the
messages), and a bad field of an entry alone, so every entry of every list
is checked field by field. A mistake that only
shows once another is fixed (a value checked against one that was itself
wrong) appears on the next run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from gateway.config import Config, ConfigError, config_from_dict, read_toml
from gateway.config.defaults import DEFAULT_NETWORKS

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
    gone = _Removed()
    first: Config | None = None
    for _ in range(_MAX_ROUNDS):
        try:
            cfg = config_from_dict(raw, env)
        except ConfigError as exc:
            message = gone.original(str(exc))
            where = _where(message)
            if where not in seen and not gone.emptied(where):
                problems.append(message)
            seen[where] = seen.get(where, 0) + 1
            if gone.take_entry(raw, _where(str(exc)), seen[where]):
                continue
            if not _take_out(raw, env, _parts(where), seen[where] - 1):
                break
            continue
        first = cfg if not problems else None
        break
    return first, problems


def public_defaults(path: str | None, env: Mapping[str, str] | None = None) -> list[str]:
    """A warning per network whose nodes are still the shipped public endpoints because
    neither the file nor the environment names any: a config that sets only one
    network leaves the other on a rate-limited public node without a word."""
    env = dict(os.environ if env is None else env)
    path = path or env.get("GATEWAY_CONFIG") or None
    try:
        raw = {} if path is None else read_toml(path)
    except ConfigError:
        return []
    tables = raw.get("networks", {})
    warnings = []
    for name, shipped in DEFAULT_NETWORKS.items():
        table = tables.get(name, {}) if isinstance(tables, dict) else {}
        if not isinstance(table, dict) or "upstreams" in table:
            continue
        if env.get(f"GATEWAY_UPSTREAM_{name.upper()}"):
            continue
        urls = ", ".join(shipped["upstreams"])
        warnings.append(
            f"networks.{name}.upstreams: not set, so the public endpoint ({urls}) serves "
            f"{name}: set your own nodes, or GATEWAY_UPSTREAM_{name.upper()}"
        )
    return warnings


class _Removed:
    """List entries taken out so far, so later messages name each by its place in the file.

    A bad entry is taken out alone (the entries after it are still checked); the
    loader then counts the list without it, so ``upstreams[0]`` may be the file's
    ``upstreams[2]``: ``original`` writes the file's index back into the message.
    """

    def __init__(self) -> None:
        self._gone: dict[str, list[int]] = {}  # list path -> file indices taken out

    def _file_index(self, where: str, index: int) -> int:
        gone = sorted(self._gone.get(where, ()))
        for taken in gone:
            if taken <= index:
                index += 1
        return index

    def original(self, message: str) -> str:
        found = _ENTRY.match(message)
        if found is None or found["list"] not in self._gone:
            return message
        index = self._file_index(found["list"], int(found["index"]))
        return f"{found['list']}[{index}]{message[found.end() :]}"

    def emptied(self, where: str) -> bool:
        """A complaint about a list whose bad entries were taken out (it is no news)."""
        return where in self._gone

    def take_entry(self, raw: dict[str, Any], where: str, times: int) -> bool:
        """Take out what ``where`` (the loader's words: its index counts the list as it
        is now) names in a list entry; False if it names none.

        ``a.list[2]`` takes out the entry. ``a.list[2].field`` takes out the field
        alone, so the entry's other fields are still checked; when the loader then
        misses it (a required field), a placeholder that passes stands in; failing
        again, the entry goes.
        """
        found = _ENTRY.match(where)
        if found is None:
            return False
        entries: Any = raw
        for key in _parts(found["list"]):
            entries = entries.get(key) if isinstance(entries, dict) else None
        current = int(found["index"])
        if not isinstance(entries, list) or current >= len(entries):
            return False
        rest = where[found.end() :]
        field = rest[1:].split(".", 1)[0] if rest.startswith(".") else ""
        entry = entries[current]
        if field and isinstance(entry, dict):
            if times == 1 and field in entry:
                del entry[field]
                return True
            if times <= 2 and field not in entry and field in _PLACEHOLDERS:
                entry[field] = _PLACEHOLDERS[field]
                return True
        del entries[current]
        self._gone.setdefault(found["list"], []).append(self._file_index(found["list"], current))
        return True


# Required fields of a list entry, and a value that passes, so the entry's other
# fields are checked once its own value was reported.
_PLACEHOLDERS: dict[str, Any] = {"url": "http://config-check.invalid"}
# "networks.bsc.upstreams[2]" (and what follows, ".url: ..."): the list and the index.
_ENTRY = re.compile(r"(?P<list>[\w.-]+)\[(?P<index>\d+)\]")


def _where(message: str) -> str:
    """The config path a loader message starts with."""
    return message.split(": ", 1)[0].split(" (", 1)[0]


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
