"""Reading what a key's traffic says: per-method insight, the failed-call log, the cost.

The writing side is gateway/store/insight.py (request insight, flushed by each
worker) and admit.lua (the daily ``cu`` counters, named in redis/keyspace.py);
this module only reads, for the dashboard's Requests and Usage pages and
``gateway usage``. Every read checks the key belongs to the account first,
through ``Store.get_key``, so another account's key id is NotFound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.redis import keyspace as ks
from gateway.store.accounts import DAY_MS, KeyRecord
from gateway.store.insight import HOUR_MS, SLOT_MS, percentile
from gateway.store.planview import PlanView

WINDOWS: Mapping[str, tuple[str, int]] = {
    "hour": ("Last hour", HOUR_MS),
    "day": ("Last 24 hours", 24 * HOUR_MS),
}


@dataclass(frozen=True, slots=True)
class MethodInsight:
    """One method of one key over a window: as the Requests page's table shows it."""

    method: str
    calls: int
    errors: dict[int, int]  # JSON-RPC code -> count, most frequent first
    p50_ms: float | None
    p99_ms: float | None

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "calls": self.calls,
            "errors": {str(c): n for c, n in self.errors.items()},
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One failed or rate-limited call from the key's capped log."""

    time_ms: int
    method: str
    code: int
    status: int
    latency_ms: float
    ip: str
    note: str = ""  # a transaction's hash and route (gateway/tx), else ""


@dataclass(frozen=True, slots=True)
class MonthCost:
    """Compute units since the 1st of this month (UTC) and what they cost on the plan."""

    since_ms: int
    compute_units: int
    plan: str
    price_per_million_cu: float
    per_key: dict[str, int] = field(default_factory=dict)

    @property
    def estimated_cost(self) -> float:
        return self.compute_units * self.price_per_million_cu / 1_000_000

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since_ms,
            "month": datetime.fromtimestamp(self.since_ms / 1000, UTC).strftime("%Y-%m"),
            "compute_units": self.compute_units,
            "plan": self.plan,
            "price_per_million_cu": self.price_per_million_cu,
            "estimated_cost": self.estimated_cost,
        }


def month_start_ms(now_ms: int) -> int:
    """Midnight UTC of the 1st of ``now_ms``'s month."""
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    return int(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


class InsightStore(PlanView):
    """Read side of request insight and cost over the shared ``Store``'s Redis."""

    async def _own(self, key_id: str, account_id: str | None) -> tuple[KeyRecord, str]:
        record = await self.store.get_key(key_id, account_id)
        return record, await self.store.key_hash_of(key_id)

    # -- per-method insight ------------------------------------------------------
    async def methods(
        self, key_id: str, window: str = "hour", account_id: str | None = None
    ) -> list[MethodInsight]:
        """Per method over the last hour (5-minute slots) or day (hours), busiest first."""
        _, khash = await self._own(key_id, account_id)
        span = WINDOWS[window][1]
        now = await self.store.now_ms()
        if window == "hour":
            names = [
                ks.insight_slot(self.prefix, khash, s)
                for s in range((now - span) // SLOT_MS + 1, now // SLOT_MS + 1)
            ]
        else:
            names = [
                ks.insight_hour(self.prefix, khash, h)
                for h in range((now - span) // HOUR_MS + 1, now // HOUR_MS + 1)
            ]
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
        return summarize(await pipe.execute())

    # -- the failed-call log -----------------------------------------------------
    async def calls(
        self,
        key_id: str,
        *,
        method: str = "",
        code: int | None = None,
        account_id: str | None = None,
        limit: int = 200,
    ) -> list[LoggedCall]:
        """The newest logged calls (at most ``limit``), optionally one method and/or code."""
        _, khash = await self._own(key_id, account_id)
        raw = await self.redis.xrevrange(ks.insight_log(self.prefix, khash), count=max(1, limit))
        out: list[LoggedCall] = []
        for _, f in raw:
            try:
                call = LoggedCall(
                    time_ms=int(f["time"]),
                    method=f.get("method", ""),
                    code=int(f.get("code", 0)),
                    status=int(f.get("status", 0)),
                    latency_ms=float(f.get("latency_ms", 0)),
                    ip=f.get("ip", ""),
                    note=f.get("note", ""),
                )
            except (KeyError, ValueError):
                continue
            if method and call.method != method:
                continue
            if code is not None and call.code != code:
                continue
            out.append(call)
        return out

    # -- cost ----------------------------------------------------------------------
    async def month_cost(
        self, records: Sequence[KeyRecord], plan: str, now_ms: int | None = None
    ) -> MonthCost:
        """Compute units of ``records`` since the 1st (UTC), priced at ``plan``'s rate.

        Priced at the plan the account is on now: plan switches within the
        month are not tracked, so the figure is an estimate, as labelled.
        """
        now = await self.store.now_ms() if now_ms is None else now_ms
        start = month_start_ms(now)
        days = range(start // DAY_MS, now // DAY_MS + 1)
        pipe = self.redis.pipeline(transaction=False)
        hashes = [await self.store.key_hash_of(r.id) for r in records]
        for khash in hashes:
            for day in days:
                pipe.hget(ks.usage_day(self.prefix, khash, day), "cu")
        replies = await pipe.execute() if hashes else []
        per_key: dict[str, int] = {}
        n = len(days)
        for i, record in enumerate(records):
            per_key[record.id] = sum(int(v or 0) for v in replies[i * n : (i + 1) * n])
        price = self._plans[plan].price_per_million_cu if plan in self._plans else 0.0
        return MonthCost(
            since_ms=start,
            compute_units=sum(per_key.values()),
            plan=plan,
            price_per_million_cu=price,
            per_key=per_key,
        )


def summarize(hashes: Sequence[Mapping[str, str]]) -> list[MethodInsight]:
    """Add up insight hashes (any workers, slots, hours) into one row per method."""
    calls: dict[str, int] = {}
    errors: dict[str, dict[int, int]] = {}
    hists: dict[str, dict[int, int]] = {}
    for data in hashes:
        for name, value in data.items():
            kind, _, rest = name.partition("|")
            try:
                n = int(value)
                if kind == "c":
                    calls[rest] = calls.get(rest, 0) + n
                elif kind == "e":
                    method, _, code = rest.rpartition("|")
                    per = errors.setdefault(method, {})
                    per[int(code)] = per.get(int(code), 0) + n
                elif kind == "b":
                    method, _, bucket = rest.rpartition("|")
                    hist = hists.setdefault(method, {})
                    hist[int(bucket)] = hist.get(int(bucket), 0) + n
            except ValueError:
                continue
    rows = [
        MethodInsight(
            method=method,
            calls=n,
            errors=dict(sorted(errors.get(method, {}).items(), key=lambda kv: (-kv[1], kv[0]))),
            p50_ms=percentile(hists.get(method, {}), 0.50),
            p99_ms=percentile(hists.get(method, {}), 0.99),
        )
        for method, n in calls.items()
    ]
    rows.sort(key=lambda r: (-r.calls, r.method))
    return rows


def fmt_money(amount: float) -> str:
    """A price or cost in dollars: at least cents, up to four decimals, never a false zero."""
    if amount == 0:
        return "$0.00"
    if amount < 0.0001:
        return "less than $0.0001"
    text = f"{amount:,.4f}".rstrip("0")
    if len(text.partition(".")[2]) < 2:
        text = f"{amount:,.2f}"
    return "$" + text


def fmt_ms(value: float | None) -> str:
    """A latency for people: ``—`` when unknown, 3 significant digits otherwise."""
    if value is None or not math.isfinite(value):
        return "—"
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"
