"""One log line per interval about hot-path Redis failures, not one per call.

A Redis outage fails every request: logging each one would bury the log (and
cost more than the request), logging none hides the outage behind a counter.
Every hot-path client (the multiplexed connection, the redis-py script
runner used on a Cluster) logs through one of these.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("gateway.redis")


class FailureLog:
    """Log the first failure of each ``interval_s``; count the ones in between."""

    __slots__ = ("_interval", "_next", "_suppressed")

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._next = 0.0
        self._suppressed = 0

    def __call__(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        suppressed, self._suppressed = self._suppressed, 0
        self._next = now + self._interval
        # WARNING, not ERROR: the failure policy (fail closed/open) handles it.
        log.warning(
            "redis unavailable on the hot path: %s (%d similar failures not logged before)",
            exc,
            suppressed,
        )
