"""Error counts per key, added up in memory and flushed in batches.

The admission script already counts requests in the one round trip a
request may cost; errors are only known after forwarding, so they are
summed here and written once a second in one pipeline. Two counts, per call:
upstream failures (no node answered: unreachable, timed out, a broken answer;
the gateway answered 502/504) and error answers (a node answered the call
with a JSON-RPC error such as ``nonce too low``: the call's outcome, not a
fault of the gateway or the node).
"""

from __future__ import annotations

import logging

from gateway.redis.flushing import flush_every
from gateway.store.accounts import Store

log = logging.getLogger("gateway.usage")


class ErrorCounter:
    """Per-key counts of failed calls and error answers, flushed once per interval."""

    def __init__(self, store: Store, interval_s: float = 1.0) -> None:
        self._store = store
        self._interval = interval_s
        self._counts: dict[str, int] = {}
        self._answers: dict[str, int] = {}

    def add(self, khash: str, n: int = 1) -> None:
        """``n`` calls no node answered (an upstream failure)."""
        self._counts[khash] = self._counts.get(khash, 0) + n

    def answered(self, khash: str, n: int = 1) -> None:
        """``n`` calls answered with a JSON-RPC error (by a node, or a local method)."""
        self._answers[khash] = self._answers.get(khash, 0) + n

    async def flush(self) -> None:
        counts, self._counts = self._counts, {}
        answers, self._answers = self._answers, {}
        try:
            await self._store.add_errors(counts, answers=answers)
        except Exception as exc:  # Redis down: keep the counts for the next try
            for khash, n in counts.items():
                self.add(khash, n)
            for khash, n in answers.items():
                self.answered(khash, n)
            log.debug("error counts not flushed: %s", exc)

    async def run(self) -> None:
        await flush_every(self._interval, self.flush)
