"""Usage counters summed in this process and written to Redis once a second.

The scale rules: a request costs at most one Redis round trip, and
with leased admission most cost none, so the counters the dashboard and
``gateway usage`` read (requests per minute and per day, per method,
rate-limited, denied and error counts, last use) are added up here and
flushed in one pipeline each ``interval_s`` (last use is written by the
lease script itself, so a deleted key's record is never re-created). A crash loses at most that
interval; the app's cleanup (SIGTERM) flushes what is left. Compute units
are not counted here: the lease script reserves them in Redis when it
grants units, so the daily quota stays exact across processes.

The Redis layout is the one ``Store.usage`` reads (see gateway.store.usage).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.redis import keyspace as ks
from gateway.redis.failurelog import RateLimitedLog, redis_failure, shown_address
from gateway.redis.flushing import flush_every

log = logging.getLogger("gateway.usage")

HOUR_TTL_MS = 176_400_000  # minutes kept 49 h
DAY_TTL_MS = 7_862_400_000  # days kept 91 days


class _KeyUsage:
    """One key's counts since the last flush.

    The minute in progress is counted in plain counters (``calls`` and
    ``methods``, keyed by the bare method name): counting an admitted
    request builds no tuple and no string. When a request arrives in
    another minute, or at a flush, they are folded into ``minutes`` and
    ``fields`` (a day always starts on a minute boundary).
    """

    __slots__ = ("calls", "fields", "methods", "minute", "minute_end", "minutes", "used_ms")

    def __init__(self) -> None:
        self.minutes: dict[int, int] = {}  # minute since the epoch -> requests
        self.fields: dict[tuple[int, str], int] = {}  # (day, field) -> count
        self.used_ms = 0
        self.minute = 0  # the minute ``calls`` and ``methods`` belong to
        self.minute_end = 0  # first ms after it (0: nothing counted yet)
        self.calls = 0
        self.methods: dict[str, int] = {}

    def fold(self) -> None:
        """Move the minute in progress into ``minutes`` and ``fields``."""
        if self.calls or self.methods:  # notifications are charged as 0 calls
            minute = self.minute
            self.minutes[minute] = self.minutes.get(minute, 0) + self.calls
            day = minute // 1440
            fields = self.fields
            fields[(day, "req")] = fields.get((day, "req"), 0) + self.calls
            for method, n in self.methods.items():
                key = (day, "m:" + method)
                fields[key] = fields.get(key, 0) + n
            self.calls = 0
            self.methods = {}
        self.minute_end = 0


class UsageSink:
    """Per-key usage added up in memory; ``flush`` writes it in one pipeline."""

    def __init__(
        self,
        redis: Redis | RedisCluster,
        prefix: str,
        *,
        interval_s: float = 1.0,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        address: str = "",
        log_interval_s: float = 10.0,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._interval = interval_s
        self._clock_ms = clock_ms
        self._keys: dict[str, _KeyUsage] = {}
        self._address = address  # for log lines (its password masked there)
        self._lines = RateLimitedLog(log_interval_s)

    def _entry(self, khash: str) -> _KeyUsage:
        entry = self._keys.get(khash)
        if entry is None:
            entry = self._keys[khash] = _KeyUsage()
        return entry

    def admitted(self, khash: str, calls: int, methods: Mapping[str, int]) -> None:
        """Count an admitted request: its calls by minute and day, by method.

        Runs for every admitted request (``python -m bench.micro.admission``
        measures it), hence the plain counters of the minute in progress.
        """
        now = self._clock_ms()
        entry = self._keys.get(khash)
        if entry is None:
            entry = self._keys[khash] = _KeyUsage()
        if not entry.minute_end > now >= entry.minute_end - 60_000:
            entry.fold()  # another minute (or the clock stepped back): start its counters
            entry.minute = now // 60_000
            entry.minute_end = (entry.minute + 1) * 60_000
        entry.calls += calls
        counts = entry.methods
        for method, n in methods.items():
            counts[method] = counts.get(method, 0) + n
        entry.used_ms = now

    def count(self, khash: str, field: str, n: int = 1) -> None:
        """Add to one per-day counter: ``lim`` (rate-limited), ``den`` (denied), ``err``."""
        key = (self._clock_ms() // 86_400_000, field)
        fields = self._entry(khash).fields
        fields[key] = fields.get(key, 0) + n

    def pending(self) -> int:
        return len(self._keys)

    async def flush(self) -> None:
        """Write every key's counts; on failure keep them for the next try."""
        batch, self._keys = self._keys, {}
        if not batch:
            return
        for usage in batch.values():
            usage.fold()
        pipe = self._redis.pipeline(transaction=False)
        p = self._prefix
        for khash, usage in batch.items():
            hours: set[str] = set()
            for minute, n in usage.minutes.items():
                hour_key = ks.usage_hour(p, khash, minute // 60)
                pipe.hincrby(hour_key, str(minute % 60), n)
                hours.add(hour_key)
            for hour_key in hours:
                pipe.pexpire(hour_key, HOUR_TTL_MS)
            days: set[str] = set()
            for (day, field), n in usage.fields.items():
                day_key = ks.usage_day(p, khash, day)
                pipe.hincrby(day_key, field, n)
                days.add(day_key)
            for day_key in days:
                pipe.pexpire(day_key, DAY_TTL_MS)
        try:
            await pipe.execute()
        except Exception as exc:  # Redis down: keep the counts for the next try
            self._merge_back(batch)
            suppressed = self._lines.failed(None)  # one line per log interval, not per flush
            if suppressed is not None:
                log.warning(
                    "usage not flushed, kept for the next try (%d keys): %s "
                    "(%d similar failures not logged before)",
                    len(self._keys),
                    redis_failure(self._address, exc),
                    suppressed,
                )
            return
        if self._lines.recovered(None):
            log.info("usage flushed again redis=%s", shown_address(self._address))

    def _merge_back(self, batch: dict[str, _KeyUsage]) -> None:
        for khash, old in batch.items():
            entry = self._entry(khash)
            for minute, n in old.minutes.items():
                entry.minutes[minute] = entry.minutes.get(minute, 0) + n
            for key, n in old.fields.items():
                entry.fields[key] = entry.fields.get(key, 0) + n
            entry.used_ms = max(entry.used_ms, old.used_ms)

    async def run(self) -> None:
        """Flush every ``interval_s`` until cancelled, then flush once more."""
        await flush_every(self._interval, self.flush)
