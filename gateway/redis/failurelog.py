"""Failure lines an operator can act on, at most one per interval, and the recovery.

A Redis outage fails every request: logging each one would bury the log (and
cost more than the request), logging none hides the outage behind a counter.
So a failure line names *where* (the Redis address, or an upstream's redacted
URL), the error class and its message, and says how many like it were held
back; once things work again one line says so. Every hot-path Redis client
(the multiplexed connection, the redis-py script runner used on a Cluster)
logs through a ``FailureLog``; the upstream pool and the head followers use
``RateLimitedLog`` with their own keys (one per node and kind of failure).

The fields travel as ``extra`` too (``target``, ``error_class``, ``error``,
``suppressed``), so ``log.format = "json"`` gives them as JSON keys.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from gateway.config.redact import redact_url, scrub

log = logging.getLogger("gateway.redis")


def error_fields(exc: BaseException, url: str = "") -> tuple[str, str]:
    """(class name, message) of ``exc``, with ``url``'s secrets masked in the message."""
    message = str(exc) or repr(exc)
    return type(exc).__name__, scrub(message, url) if url else message


def shown_address(address: str) -> str:
    """A Redis URL with its password masked, or ``host:port`` as it is; ``?`` when unknown."""
    if not address:
        return "?"
    return redact_url(address) if "://" in address else address


def redis_failure(address: str, exc: BaseException) -> str:
    """One Redis failure as a line's tail: ``redis=<address> error=<Class>: <message>``.

    ``address`` is a Redis URL or ``host:port``; a password in it is masked.
    For callers that log a Redis failure themselves (the key-events listener's
    reconnect line, the usage flush).
    """
    cls, message = error_fields(exc, address)
    return f"redis={shown_address(address)} error={cls}: {message}"


class RateLimitedLog:
    """Lets one failure line per key through each ``interval_s``; counts the rest.

    ``failed(key)`` answers None (hold the line back) or how many were held
    back since the last line; ``recovered(key)`` answers whether a failure
    was logged for ``key`` since it last worked (so exactly one recovery
    line follows an outage, and none follows a success).
    """

    __slots__ = ("_clock", "_down", "_interval", "_next", "_suppressed")

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_s
        self._clock = clock
        self._next: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}
        self._down: set[Hashable] = set()

    def failed(self, key: Hashable) -> int | None:
        now = self._clock()
        if now < self._next.get(key, 0.0):
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._next[key] = now + self._interval
        self._down.add(key)
        return self._suppressed.pop(key, 0)

    def recovered(self, key: Hashable) -> bool:
        if key not in self._down:
            return False
        self._down.discard(key)
        self._next.pop(key, None)
        self._suppressed.pop(key, None)
        return True


class FailureLog:
    """Hot-path Redis failures of one client: rate-limited lines naming its address."""

    __slots__ = ("_address", "_limit")

    def __init__(self, interval_s: float, address: str = "") -> None:
        self._limit = RateLimitedLog(interval_s)
        self._address = shown_address(address)

    def __call__(self, exc: BaseException) -> None:
        suppressed = self._limit.failed(None)
        if suppressed is None:
            return
        cls, message = error_fields(exc)
        extra: dict[str, Any] = {
            "target": self._address,
            "error_class": cls,
            "error": message,
            "suppressed": suppressed,
        }
        # WARNING, not ERROR: the failure policy (fail closed/open) handles it.
        log.warning(
            "redis unavailable on the hot path redis=%s error=%s: %s "
            "(%d similar failures not logged before)",
            extra["target"],
            cls,
            message,
            suppressed,
            extra=extra,
        )

    def ok(self) -> None:
        """A call worked: one line if a failure was logged since the last success."""
        if self._limit.recovered(None):
            log.info(
                "redis recovered redis=%s",
                self._address,
                extra={"target": self._address},
            )
