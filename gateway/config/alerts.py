"""The ``[alerts]`` section: usage alerts evaluated in every gateway process and
delivered to the account holders' webhooks (gateway/alerts).

Same rules as schema.py (frozen dataclass, the field defaults are the shipped
defaults, load.py type-checks TOML against the annotations); reached as
``gateway.config.AlertsConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """Usage alerts and signed webhooks (docs/ALERTS.md)."""

    enabled: bool = True
    # Each process reads the usage counters this often; a rule fires within
    # about this long (plus the one-second usage flush) of its condition.
    interval_s: float = 5.0
    # Webhook URLs must be https and resolve only to public addresses; true
    # also allows loopback, private and link-local targets, over plain http
    # too (tests, the demo, a receiver on the operator's own network).
    allow_private_targets: bool = False
    timeout_s: float = 5.0  # one delivery attempt: connect, send, answer
    # A failed attempt is retried after retry_base_s, then twice that, and so
    # on (at most an hour apart), until retry_for_s after the first attempt.
    retry_base_s: float = 30.0
    retry_for_s: float = 86_400.0
    log_cap: int = 50  # deliveries kept per webhook for its delivery log
    max_webhooks: int = 5  # per account
    max_rules: int = 20  # per account
    # error_percent needs this many calls in its window before it may fire,
    # so one failed call out of one is not "100 % errors".
    error_min_calls: int = 20


def alerts_problem(cfg: AlertsConfig) -> str | None:
    """What is wrong with ``cfg``, naming its config path (None: nothing)."""
    positive = {
        "interval_s": cfg.interval_s,
        "timeout_s": cfg.timeout_s,
        "retry_base_s": cfg.retry_base_s,
        "retry_for_s": cfg.retry_for_s,
    }
    for name, value in positive.items():
        if value <= 0:
            return f"alerts.{name}: must be above 0"
    at_least_one = {
        "log_cap": cfg.log_cap,
        "max_webhooks": cfg.max_webhooks,
        "max_rules": cfg.max_rules,
        "error_min_calls": cfg.error_min_calls,
    }
    for name, count in at_least_one.items():
        if count < 1:
            return f"alerts.{name}: must be at least 1"
    return None
