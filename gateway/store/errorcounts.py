"""Upstream error counts per key, added up in memory and flushed in batches.

The admission script already counts requests in the one round trip a
request may cost; errors are only known after forwarding, so they are
summed here and written once a second in one pipeline.
"""

from __future__ import annotations

import logging

from gateway.redis.flushing import flush_every
from gateway.store.accounts import Store

log = logging.getLogger("gateway.usage")


class ErrorCounter:
    """Per-key counts of calls a node answered with an error, flushed once per interval."""

    def __init__(self, store: Store, interval_s: float = 1.0) -> None:
        self._store = store
        self._interval = interval_s
        self._counts: dict[str, int] = {}

    def add(self, khash: str, n: int = 1) -> None:
        self._counts[khash] = self._counts.get(khash, 0) + n

    async def flush(self) -> None:
        counts, self._counts = self._counts, {}
        try:
            await self._store.add_errors(counts)
        except Exception as exc:  # Redis down: keep the counts for the next try
            for khash, n in counts.items():
                self.add(khash, n)
            log.debug("error counts not flushed: %s", exc)

    async def run(self) -> None:
        await flush_every(self._interval, self.flush)
