"""The Store's value types: accounts, key records, usage, attempt counters.

Frozen and I/O-free, so views, the CLI and tests can hold them without a Store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class AttemptCounter:
    """One fixed-window attempt counter of a throttle (see ``Store.take_attempt``)."""

    name: str  # short and printable; the Store adds prefix and hash tag
    limit: int
    window_ms: int
    skippable: bool = False  # not checked while the throttle's marker exists


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    email: str
    plan: str
    created_at: int


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    account: str
    name: str
    env: str
    plan: str
    hint: str
    created_at: int
    expires_at: int | None = None
    revoked_at: int | None = None
    last_used_at: int | None = None
    origins: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    rotated_to: str | None = None
    # The owner's caps (gateway/store/keylimits.py); None = the plan's.
    rate_cap: float | None = None
    daily_cu_cap: int | None = None
    # The owner's private-transaction choice (gateway/store/keytx.py); "" = the plan's.
    private_tx: str = ""

    def status(self, now_ms: int) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now_ms``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now_ms >= self.expires_at:
            return "expired"
        return "active"

    def stopped_at(self) -> int | None:
        """When the key stopped (or will stop) working; None for a key with no end."""
        if self.revoked_at is not None:
            return self.revoked_at
        return self.expires_at

    def as_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "account": self.account,
            "name": self.name,
            "env": self.env,
            "plan": self.plan,
            "hint": self.hint,
            "status": self.status(now_ms),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "last_used_at": self.last_used_at,
            "origins": list(self.origins),
            "ips": list(self.ips),
            "methods": list(self.methods),
            "rotated_to": self.rotated_to,
            "rate_cap": self.rate_cap,
            "daily_cu_cap": self.daily_cu_cap,
            "private_tx": self.private_tx,
        }


@dataclass(frozen=True, slots=True)
class Usage:
    """Usage of one key, as the dashboard and ``gateway usage`` show it."""

    key_id: str
    since_ms: int
    until_ms: int
    per_minute: list[tuple[int, int]]  # (minute start ms, requests), oldest first
    per_day: list[tuple[int, dict[str, int]]]  # (day start ms, totals), oldest first
    methods: dict[str, int] = field(default_factory=dict)
    # (day start ms, {method: calls}), as per_day: what a usage export lists per day
    day_methods: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    total: int = 0
    limited: int = 0
    denied: int = 0
    errors: int = 0  # upstream failures: calls no node answered (502/504)
    error_answers: int = 0  # calls answered with a JSON-RPC error (the call's outcome)
    compute_units: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "since": self.since_ms,
            "until": self.until_ms,
            "requests": self.total,
            "rate_limited": self.limited,
            "denied": self.denied,
            "errors": self.errors,
            "error_answers": self.error_answers,
            "compute_units": self.compute_units,
            "methods": self.methods,
            "per_minute": [[t, n] for t, n in self.per_minute if n],
            "per_day": [{"day": t, **v} for t, v in self.per_day],
        }


def counts_towards_cap(record: KeyRecord, now_ms: int) -> bool:
    """A key that still works counts, also while a rotation's grace period runs."""
    return record.status(now_ms) == "active"
