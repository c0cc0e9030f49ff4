"""The operator's admin API settings (``[admin]``): who may call it, by token hash.

Only the hex SHA-256 of each token is in the config, never the token: a
leaked config file opens nothing. Read by ``gateway.admin``; the API is
served on the metrics listener (``server.metrics_listen``), never on the
public port. Read from TOML by ``adminload``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdminToken:
    """One admin token: its name (what logs and the audit log show), hash and role."""

    name: str
    sha256: str  # hex SHA-256 of the token, lower case
    role: str = "read"  # "read": GET only; "write": every call


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """``[admin]``: no tokens (the default) means every admin call answers 401."""

    tokens: tuple[AdminToken, ...] = ()
    audit_cap: int = 10_000  # audit entries kept in Redis (the oldest drop off)
