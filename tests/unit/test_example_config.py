"""gateway.example.toml holds every setting, and loads as the gateway's own config.

The example is where an operator looks a setting up; one that is missing
there is one nobody finds. Each section's settings are the fields of its
config dataclass (networks and plans: every field of one entry), written
either as a line ``name = value`` or commented out as ``# name = value``
(settings with no useful example value, or whose default depends on
something else).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

from gateway.config import Config, config_from_dict
from gateway.config.schema import NetworkConfig, PlanConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "gateway.example.toml"


def _sections(text: str) -> dict[str, set[str]]:
    """Section header -> the setting names under it (active or commented out)."""
    out: dict[str, set[str]] = {}
    current = ""
    for line in text.splitlines():
        head = re.match(r"^#?\s*\[([\w.]+)\]", line)
        if head:
            current = head.group(1)
            out.setdefault(current, set())
            continue
        name = re.match(r"^#?\s*([a-z_][a-z0-9_]*)\s*=", line)
        if name and current:
            out[current].add(name.group(1))
    return out


# Fields the loader derives from other settings, not settings themselves:
# weights' "prefix*" keys, the node table (from `upstreams` entries), the
# method routes (from `extra_methods` tables).
DERIVED = {"weight_patterns", "nodes", "routes", "builders"}  # builders: from private_tx


def test_every_setting_is_in_the_example() -> None:
    sections = _sections(EXAMPLE.read_text())
    missing: list[str] = []
    for field in dataclasses.fields(Config):
        if field.name in ("networks", "plans", "default_plan"):
            continue
        cls = type(getattr(Config(), field.name))
        for sub in dataclasses.fields(cls):
            if sub.init and sub.name not in sections.get(field.name, set()):
                missing.append(f"[{field.name}] {sub.name}")
    per_entry = {"networks": NetworkConfig, "plans": PlanConfig}
    for prefix, cls in per_entry.items():
        written = set().union(*(v for k, v in sections.items() if k.startswith(prefix + ".")))
        for sub in dataclasses.fields(cls):
            if sub.init and sub.name not in written | {"name"} | DERIVED:
                missing.append(f"[{prefix}.*] {sub.name}")
    assert not missing, "settings missing from gateway.example.toml: " + ", ".join(missing)


def test_the_example_loads() -> None:
    cfg = config_from_dict(tomllib.loads(EXAMPLE.read_text()), env={})
    assert {n.name for n in cfg.networks} == {"bsc", "opbnb"}
