"""Reading a key's usage (the counters admit.lua writes) and adding error counts.

Minutes are kept 48 h (``p:{H}:h:<hour>``), days 91 (``p:{H}:d:<day>``); both are
written on the hot path by admit.lua, so this side only reads them, in one
pipeline, plus the error counts that are only known after forwarding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.redis import keyspace as ks
from gateway.store.core import DAY_MS, HOUR_MS, MINUTE_MS, StoreCore
from gateway.store.records import KeyRecord, Usage


class UsageReading(StoreCore):
    """Usage reads; ``get_key`` and ``key_hash_of`` come from the ApiKeys mixin."""

    if TYPE_CHECKING:

        async def get_key(self, key_id: str, account_id: str | None = None) -> KeyRecord: ...

        async def key_hash_of(self, key_id: str) -> str: ...

    async def usage(
        self, key_id: str, since_ms: int = DAY_MS, account_id: str | None = None
    ) -> Usage:
        """Usage over the last ``since_ms`` (minutes kept 48 h, days 90)."""
        await self.get_key(key_id, account_id)
        khash = await self.key_hash_of(key_id)
        now = await self.now_ms()
        start = now - since_ms
        first_hour, last_hour = max(start, now - 48 * HOUR_MS) // HOUR_MS, now // HOUR_MS
        first_day, last_day = start // DAY_MS, now // DAY_MS
        pipe = self.redis.pipeline(transaction=False)
        hours = list(range(first_hour, last_hour + 1))
        days = list(range(first_day, last_day + 1))
        for hour in hours:
            pipe.hgetall(ks.usage_hour(self.prefix, khash, hour))
        for day in days:
            pipe.hgetall(ks.usage_day(self.prefix, khash, day))
        replies = await pipe.execute()
        per_minute: list[tuple[int, int]] = []
        first_minute = start // MINUTE_MS
        for hour, data in zip(hours, replies[: len(hours)], strict=True):
            for minute in range(60):
                t = hour * HOUR_MS + minute * MINUTE_MS
                if first_minute <= t // MINUTE_MS <= now // MINUTE_MS:
                    per_minute.append((t, int(data.get(str(minute), 0))))
        per_day: list[tuple[int, dict[str, int]]] = []
        day_methods: list[tuple[int, dict[str, int]]] = []
        methods: dict[str, int] = {}
        sums = {"req": 0, "lim": 0, "den": 0, "err": 0, "ans": 0, "cu": 0}
        for day, data in zip(days, replies[len(hours) :], strict=True):
            totals = {k: int(data.get(k, 0)) for k in sums}
            per_day.append((day * DAY_MS, totals))
            for k in sums:
                sums[k] += totals[k]
            of_day: dict[str, int] = {}
            for field_name, count in data.items():
                if field_name.startswith("m:"):
                    of_day[field_name[2:]] = int(count)
                    methods[field_name[2:]] = methods.get(field_name[2:], 0) + int(count)
            day_methods.append((day * DAY_MS, of_day))
        total = sum(n for _, n in per_minute) if since_ms <= 48 * HOUR_MS else sums["req"]
        return Usage(
            key_id=key_id,
            since_ms=start,
            until_ms=now,
            per_minute=per_minute,
            per_day=per_day,
            methods=dict(sorted(methods.items(), key=lambda kv: -kv[1])),
            total=total,
            limited=sums["lim"],
            denied=sums["den"],
            errors=sums["err"],
            error_answers=sums["ans"],
            compute_units=sums["cu"],
            day_methods=day_methods,
        )

    async def add_errors(
        self,
        counts: Mapping[str, int],
        now_ms: int | None = None,
        answers: Mapping[str, int] | None = None,
    ) -> None:
        """Add counts per key hash (flushed in batches, off the hot path): ``counts``
        calls no node answered (``err``), ``answers`` calls answered with a
        JSON-RPC error (``ans``)."""
        if not counts and not answers:
            return
        now = now_ms if now_ms is not None else await self.now_ms()
        day = now // DAY_MS
        pipe = self.redis.pipeline(transaction=False)
        for field_name, per_key in (("err", counts), ("ans", answers or {})):
            for khash, count in per_key.items():
                day_key = ks.usage_day(self.prefix, khash, day)
                pipe.hincrby(day_key, field_name, count)
                pipe.pexpire(day_key, 91 * DAY_MS)
        await pipe.execute()
