"""The four alert rules: what each one's threshold and window mean, checked values, and
the condition itself (pure functions over counter readings; no I/O).

A rule applies to every working key of its account. The counters are the
per-day ones the hot path already writes (``p:{H}:d:<day>``: ``cu`` units,
``lim`` rate-limited calls, ``req`` calls, ``err`` + ``ans`` errors); a
windowed rule subtracts the reading taken when its window began.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.store.core import DAY_MS

# A reading: day number -> counter name -> value (the key's day hashes).
Reading = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class RuleKind:
    name: str
    title: str  # what the dashboard lists ("{n}" is the threshold)
    low: float  # smallest threshold
    high: float  # largest threshold
    windowed: bool  # window_s is the owner's choice (else fixed by the rule)
    counters: tuple[str, ...] = ()


RULES: Mapping[str, RuleKind] = {
    k.name: k
    for k in (
        RuleKind("quota_percent", "a key reached {n} % of its daily quota", 1, 100, False, ("cu",)),
        RuleKind("rate_limited", "more than {n} rate-limited calls in {w}", 0, 1e9, True, ("lim",)),
        RuleKind("key_expiring_days", "a key expires within {n} days", 1, 365, False),
        RuleKind(
            "error_percent",
            "errors above {n} % of calls in {w}",
            0,
            100,
            True,
            ("req", "err", "ans"),
        ),
    )
}
DEFAULT_WINDOW_S = 300
MIN_WINDOW_S = 60
MAX_WINDOW_S = 86_400


class RuleRefused(ValueError):
    """A rule as asked cannot be made; the message says why, for its owner."""


def checked_rule(rule: str, threshold: object, window_s: object = None) -> tuple[str, float, int]:
    """(rule, threshold, window_s) as stored, or ``RuleRefused``.

    ``window_s`` is the owner's for ``rate_limited`` and ``error_percent``
    (60 s to a day, 300 by default); ``quota_percent`` counts a UTC day and
    ``key_expiring_days`` fires once per expiry, so a value sent for them is
    ignored.
    """
    kind = RULES.get(rule) if isinstance(rule, str) else None
    if kind is None:
        raise RuleRefused(f"the rule must be one of {', '.join(RULES)}")
    n = _number(threshold, "threshold")
    if not kind.low <= n <= kind.high:
        raise RuleRefused(
            f"the threshold of {rule} must be {_show(kind.low)} to {_show(kind.high)}"
        )
    if rule == "key_expiring_days" and not n.is_integer():
        raise RuleRefused("the threshold of key_expiring_days must be a whole number of days")
    if not kind.windowed:
        window = MAX_WINDOW_S if rule == "quota_percent" else int(n) * MAX_WINDOW_S
        return rule, n, window
    if window_s is None or window_s == "":
        return rule, n, DEFAULT_WINDOW_S
    w = _number(window_s, "window_s")
    if not w.is_integer() or not MIN_WINDOW_S <= w <= MAX_WINDOW_S:
        raise RuleRefused(
            f"the window (window_s) must be whole seconds, {MIN_WINDOW_S} to {MAX_WINDOW_S}"
        )
    return rule, n, int(w)


def describe(rule: str, threshold: float, window_s: int) -> str:
    """The rule in words: "more than 50 rate-limited calls in 5 min"."""
    kind = RULES[rule]
    return kind.title.format(n=_show(threshold), w=_duration(window_s))


def _number(value: object, name: str) -> float:
    if isinstance(value, bool):
        raise RuleRefused(f"the {name} must be a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RuleRefused(f"the {name} must be a number") from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise RuleRefused(f"the {name} must be a number")
    return float(value)


def _show(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:g}"


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


# -- conditions --------------------------------------------------------------------
def window_start(rule: str, window_s: int, now_ms: int, expires_ms: float) -> int:
    """The start of the window the rule is in at ``now_ms`` (fires at most once per window)."""
    if rule == "key_expiring_days":
        return int(expires_ms)  # once per expiry: a new expiry date may fire again
    if rule == "quota_percent":
        return now_ms // DAY_MS * DAY_MS
    span = window_s * 1000
    return now_ms // span * span


def counted(now: Reading, base: Reading, name: str) -> int:
    """How much counter ``name`` grew from ``base`` to ``now`` (over the days both hold)."""
    total = 0
    for day, values in now.items():
        total += values.get(name, 0) - base.get(day, {}).get(name, 0)
    return max(0, total)


def value_of(
    rule: str,
    *,
    now_ms: int,
    expires_ms: float,
    quota: int,
    today: Mapping[str, int],
    now: Reading,
    base: Reading,
    min_calls: int,
) -> float | None:
    """The rule's measure for one key, or None where it cannot apply (no quota, no
    expiry, too few calls)."""
    if rule == "quota_percent":
        return round(today.get("cu", 0) * 100 / quota, 2) if quota > 0 else None
    if rule == "key_expiring_days":
        if math.isinf(expires_ms) or expires_ms <= now_ms:
            return None
        return round((expires_ms - now_ms) / DAY_MS, 2)
    if rule == "rate_limited":
        return float(counted(now, base, "lim"))
    calls = counted(now, base, "req")
    if calls < min_calls:
        return None
    errors = counted(now, base, "err") + counted(now, base, "ans")
    return round(errors * 100 / calls, 2)


def fires(rule: str, value: float | None, threshold: float) -> bool:
    """Whether ``value`` meets the rule: "reached", "more than", "within", "above"."""
    if value is None:
        return False
    if rule == "quota_percent":
        return value >= threshold
    if rule == "key_expiring_days":
        return value <= threshold
    return value > threshold
