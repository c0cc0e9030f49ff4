"""``[admin]`` read from TOML: the token table checked entry by entry, by path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.config.admin import AdminConfig, AdminToken
from gateway.config.schema import ConfigError

ROLES = ("read", "write")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


def admin_from_raw(raw: Any) -> AdminConfig:
    """``[admin]`` from TOML, every mistake named by its path (``admin.tokens[0].role``)."""
    if raw is None:
        return AdminConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError("admin: must be a table")
    for key in raw:
        if key not in ("tokens", "audit_cap"):
            raise ConfigError(f"admin.{key}: unknown config key")
    cap = raw.get("audit_cap", AdminConfig().audit_cap)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigError("admin.audit_cap: expected an integer of at least 1")
    entries = raw.get("tokens", [])
    if not isinstance(entries, list):
        raise ConfigError("admin.tokens: expected a list of { name, sha256, role } tables")
    tokens: list[AdminToken] = []
    for i, entry in enumerate(entries):
        tokens.append(_token(entry, f"admin.tokens[{i}]"))
    names = [t.name for t in tokens]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"admin.tokens[{i}].name: {name!r} is used twice")
    hashes = [t.sha256 for t in tokens]
    for i, digest in enumerate(hashes):
        if digest in hashes[:i]:
            raise ConfigError(f"admin.tokens[{i}].sha256: the same token is listed twice")
    return AdminConfig(tokens=tuple(tokens), audit_cap=cap)


def _token(entry: Any, path: str) -> AdminToken:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{path}: expected a table {{ name, sha256, role }}")
    for key in entry:
        if key not in ("name", "sha256", "role"):
            raise ConfigError(f"{path}.{key}: unknown config key")
    name = entry.get("name")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ConfigError(
            f"{path}.name: expected a name of letters, digits and _ . @ - (at most 64)"
        )
    digest = entry.get("sha256")
    if not isinstance(digest, str) or _HEX64.fullmatch(digest.lower()) is None:
        raise ConfigError(
            f"{path}.sha256: expected the token's hex SHA-256 (64 hex digits), never the token"
        )
    role = entry.get("role", "read")
    if role not in ROLES:
        raise ConfigError(f'{path}.role: must be "read" or "write"')
    return AdminToken(name=name, sha256=digest.lower(), role=role)


def admin_to_raw(cfg: AdminConfig) -> dict[str, Any]:
    """``cfg`` in the TOML shape ``admin_from_raw`` reads (for worker processes)."""
    return {
        "tokens": [{"name": t.name, "sha256": t.sha256, "role": t.role} for t in cfg.tokens],
        "audit_cap": cfg.audit_cap,
    }
