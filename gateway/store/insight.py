"""Request insight per key: calls, errors by code and latency, summed in each worker.

The handler calls ``InsightSink.record`` for every answered call; that is a
few dict updates in memory, never a Redis command. ``run()`` flushes the
sums once per interval in ONE pipeline (the way gateway/store/errorcounts.py's
ErrorCounter does for error counts), so the request path keeps its one
Redis round trip. Redis layout (``p`` = prefix, ``H`` = SHA-256 of the key,
the same ``{H}`` hash tag as every other key of that API key):

    p:{H}:q:f:<5-minute slot>   hash, TTL 2 h    the "last hour" view
    p:{H}:q:h:<hour>            hash, TTL 49 h   the "last day" view
    p:{H}:q:log                 stream of failed or rate-limited calls,
                                XADD MAXLEN ~ log_cap, TTL log_ttl_s

Hash fields: ``c|<method>`` calls, ``e|<method>|<code>`` errors by JSON-RPC
code, ``b|<method>|<bucket>`` latency histogram. Buckets are fixed and
logarithmic (four per doubling, about 9 % wide), so histograms from any
number of workers, slots and hours add up field by field and p50/p99 are
read from the sum. Stream entries hold time, method, code, status,
latency_ms, the client's network (/24 or /48) and, for a transaction no
endpoint took, its hash and route (``note``): never a key or params.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.identity.netmask import mask_ip
from gateway.redis import keyspace as ks
from gateway.redis.flushing import flush_every

log = logging.getLogger("gateway.insight")

SLOT_MS = 5 * 60_000
HOUR_MS = 3_600_000
SLOT_TTL_MS = 2 * HOUR_MS
HOUR_TTL_MS = 49 * HOUR_MS

# Latency buckets: bucket b >= 1 holds [2**((b - 13) / 4), 2**((b - 12) / 4)) ms,
# so bucket 13 starts at 1 ms; bucket 0 holds everything below 0.125 ms and
# the last one (MAX_BUCKET) everything from about 110 s up.
_PER_OCTAVE = 4
_ONE_MS = 12
MAX_BUCKET = 80
_FLOOR_MS: float = math.pow(2.0, -_ONE_MS / _PER_OCTAVE)


def bucket_of(latency_ms: float) -> int:
    """The histogram bucket of a latency (fixed bounds, so sums merge exactly)."""
    if latency_ms < _FLOOR_MS:
        return 0
    b = math.floor(math.log2(latency_ms) * _PER_OCTAVE) + _ONE_MS + 1
    return b if b < MAX_BUCKET else MAX_BUCKET


def bucket_value(bucket: int) -> float:
    """A bucket's representative latency in ms: its geometric middle (bucket 0: its bound)."""
    if bucket <= 0:
        return _FLOOR_MS
    return math.pow(2.0, (bucket - _ONE_MS - 0.5) / _PER_OCTAVE)


def percentile(hist: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a merged histogram, or None when it is empty."""
    total = sum(hist.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(max(hist))  # pragma: no cover - the loop always reaches rank


class _Sums:
    """One key's one method between two flushes."""

    __slots__ = ("calls", "errors", "hist")

    def __init__(self) -> None:
        self.calls = 0
        self.errors: dict[int, int] = {}
        self.hist: dict[int, int] = {}

    def add(self, other: _Sums) -> None:
        self.calls += other.calls
        for code, n in other.errors.items():
            self.errors[code] = self.errors.get(code, 0) + n
        for b, n in other.hist.items():
            self.hist[b] = self.hist.get(b, 0) + n


# (ms since epoch, method, JSON-RPC code, HTTP status, latency ms, client IP)
_Entry = tuple[int, str, int, int, float, str, str]

# The per-method sums count every call to a method that is not offered under
# this one name: what a client calls is unbounded, a key's insight hashes are
# not. The call log (capped at log_cap) names the method as sent.
NOT_OFFERED = "(not offered)"
MAX_SHOWN_METHOD = 64


def shown_method(sent: str) -> str:
    """A method name as the client sent it, for the call log: cut at 64 characters,
    characters that would not print (controls, lone surrogates) as U+FFFD."""
    cut = sent[:MAX_SHOWN_METHOD]
    if cut.isprintable():
        return cut
    return "".join(
        ch if ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF else "\ufffd" for ch in cut
    )


class InsightSink:
    """Per-process aggregator of answered calls; ``flush()`` writes one pipeline."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        *,
        interval_s: float = 1.0,
        log_cap: int = 200,
        log_ttl_s: int = 7 * 24 * 3600,
        max_keys: int = 10_000,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._interval = interval_s
        self._log_cap = max(1, log_cap)
        self._log_ttl_ms = max(1, log_ttl_s) * 1000
        self._max_keys = max(1, max_keys)
        self._sums: dict[str, dict[str, _Sums]] = {}
        self._logs: dict[str, deque[_Entry]] = {}
        self.dropped = 0  # calls not summed because max_keys distinct keys were pending

    def record(
        self,
        khash: str,
        method: str,
        code: int,
        http_status: int,
        latency_ms: float,
        client_ip: str,
        not_offered: str = "",
        note: str = "",
    ) -> None:
        """Count one answered call (``code`` 0 = success); memory only, no I/O.

        Only keys that exist should be recorded (the caller knows after
        admission): distinct keys pending per flush are capped at
        ``max_keys``, so a flood of made-up keys cannot grow memory.
        ``not_offered``: the method the client sent when it is not offered;
        the call log shows it (``shown_method``), the sums count it as
        ``NOT_OFFERED``.
        """
        logged = method
        if not_offered:
            method, logged = NOT_OFFERED, shown_method(not_offered)
        per_key = self._sums.get(khash)
        if per_key is None:
            if len(self._sums) >= self._max_keys:
                self.dropped += 1
                return
            per_key = self._sums[khash] = {}
        sums = per_key.get(method)
        if sums is None:
            sums = per_key[method] = _Sums()
        sums.calls += 1
        b = bucket_of(latency_ms)
        hist = sums.hist
        hist[b] = hist.get(b, 0) + 1
        if code or http_status >= 400:
            if code:
                sums.errors[code] = sums.errors.get(code, 0) + 1
            calls = self._logs.get(khash)
            if calls is None:
                calls = self._logs[khash] = deque(maxlen=self._log_cap)
            calls.append(
                (int(time.time() * 1000), logged, code, http_status, latency_ms, client_ip, note)
            )

    async def flush(self, now_ms: int | None = None) -> None:
        """Write the sums and logged calls gathered since the last flush, in one pipeline.

        If Redis fails the data is merged back and tried again next time
        (bounded: the same caps apply as for new calls).
        """
        sums, self._sums = self._sums, {}
        logs, self._logs = self._logs, {}
        if not sums and not logs:
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        pipe = self._redis.pipeline(transaction=False)
        for khash, methods in sums.items():
            self._write_sums(pipe, khash, methods, now)
        for khash, entries in logs.items():
            self._write_log(pipe, khash, entries)
        try:
            await pipe.execute()
        except Exception as exc:  # Redis down: keep everything for the next try
            self._merge_back(sums, logs)
            log.debug("insight not flushed: %s", exc)

    def _write_sums(self, pipe: Any, khash: str, methods: Mapping[str, _Sums], now: int) -> None:
        keys = (
            (ks.insight_slot(self._prefix, khash, now // SLOT_MS), SLOT_TTL_MS),
            (ks.insight_hour(self._prefix, khash, now // HOUR_MS), HOUR_TTL_MS),
        )
        for key, ttl in keys:
            for method, s in methods.items():
                pipe.hincrby(key, f"c|{method}", s.calls)
                for code, n in s.errors.items():
                    pipe.hincrby(key, f"e|{method}|{code}", n)
                for b, n in s.hist.items():
                    pipe.hincrby(key, f"b|{method}|{b}", n)
            pipe.pexpire(key, ttl)

    def _write_log(self, pipe: Any, khash: str, entries: Iterable[_Entry]) -> None:
        key = ks.insight_log(self._prefix, khash)
        for at, method, code, status, latency, ip, note in entries:
            fields: dict[str, Any] = {
                "time": at,
                "method": method,
                "code": code,
                "status": status,
                "latency_ms": f"{latency:.1f}",
                "ip": mask_ip(ip),
            }
            if note:
                fields["note"] = note[:200]
            pipe.xadd(key, fields, maxlen=self._log_cap, approximate=True)
        pipe.pexpire(key, self._log_ttl_ms)

    def _merge_back(
        self, sums: Mapping[str, Mapping[str, _Sums]], logs: Mapping[str, deque[_Entry]]
    ) -> None:
        for khash, methods in sums.items():
            per_key = self._sums.get(khash)
            if per_key is None:
                if len(self._sums) >= self._max_keys:
                    self.dropped += sum(s.calls for s in methods.values())
                    continue
                per_key = self._sums[khash] = {}
            for method, s in methods.items():
                per_key.setdefault(method, _Sums()).add(s)
        for khash, entries in logs.items():
            newer = self._logs.get(khash, ())
            merged: deque[_Entry] = deque(entries, maxlen=self._log_cap)
            merged.extend(newer)
            self._logs[khash] = merged

    async def run(self) -> None:
        """Flush every interval until cancelled; a last flush on the way out (SIGTERM)."""
        await flush_every(self._interval, self.flush)
