"""What differs between two configs, by config path: the answer of a reload.

Paths are the TOML's (``server.workers``, ``networks.bsc.upstreams``,
``plans.free``); a token table is named, never its hash. Values are not
shown: a node URL or a Redis URL may carry a secret.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gateway.config.schema import Config


def config_changes(old: Config, new: Config) -> list[str]:
    """The config paths whose value differs between ``old`` and ``new``, sorted."""
    changed: list[str] = []
    for f in dataclasses.fields(Config):
        name = f.name
        a, b = getattr(old, name), getattr(new, name)
        if name in ("networks", "plans"):
            changed += _named(name, {x.name: x for x in a}, {x.name: x for x in b})
        elif name == "admin":
            if a.audit_cap != b.audit_cap:
                changed.append("admin.audit_cap")
            if a.tokens != b.tokens:
                changed.append("admin.tokens")
        elif dataclasses.is_dataclass(a):
            changed += _fields(name, a, b)
        elif a != b:
            changed.append(name)
    return sorted(changed)


def _fields(path: str, a: Any, b: Any) -> list[str]:
    return [
        f"{path}.{f.name}"
        for f in dataclasses.fields(a)
        if getattr(a, f.name) != getattr(b, f.name)
    ]


def _named(path: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = [f"{path}.{name} (added)" for name in new.keys() - old.keys()]
    out += [f"{path}.{name} (removed)" for name in old.keys() - new.keys()]
    for name in old.keys() & new.keys():
        out += _fields(f"{path}.{name}", old[name], new[name])
    return out
