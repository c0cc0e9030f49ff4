"""Usage per key: totals, a chart by minute / hour / day, methods, refusals.

All numbers come from ``Store.usage`` (the same counters the admission
script bumps and ``gateway usage`` prints); this module only picks the
window, groups minutes into hours for the chart, and renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from gateway.dashboard.charts import bar_chart
from gateway.dashboard.keys import STATUS_WORDS
from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of, fmt_number, login_required, render
from gateway.store.accounts import DAY_MS, HOUR_MS, MINUTE_MS, Account, KeyRecord, NotFound, Usage
from gateway.store.insightquery import InsightStore, fmt_money
from gateway.store.usageexport import export_usage, to_csv, to_json

SUMMARY_LIMIT = 50  # keys listed in the overview table (newest first)


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    title: str
    span_ms: int
    step_ms: int
    tick_every: int


WINDOWS: tuple[Window, ...] = (
    Window("1h", "Last hour", HOUR_MS, MINUTE_MS, 10),
    Window("24h", "Last 24 hours", DAY_MS, HOUR_MS, 3),
    Window("7d", "Last 7 days", 7 * DAY_MS, DAY_MS, 1),
    Window("30d", "Last 30 days", 30 * DAY_MS, DAY_MS, 5),
)
DEFAULT_WINDOW = "24h"
_STEP_WORD = {MINUTE_MS: "minute", HOUR_MS: "hour", DAY_MS: "day"}


@login_required
async def usage_page(request: web.Request, account: Account) -> web.StreamResponse:
    store = store_of(request)
    window = {w.name: w for w in WINDOWS}.get(
        request.query.get("window", ""), _window(DEFAULT_WINDOW)
    )
    records = await store.list_keys(account.id)
    now = await store.now_ms()
    summary: list[dict[str, Any]] = []
    for record in records[:SUMMARY_LIMIT]:
        day = await store.usage(record.id, DAY_MS, account_id=account.id)
        summary.append(
            {
                "record": record,
                "status": record.status(now),
                "total": day.total,
                "limited": day.limited,
            }
        )
    selected = await _selected(request, account, records, now, summary)
    context: dict[str, Any] = {
        "windows": WINDOWS,
        "window": window,
        "selected": selected,
        "summary": summary,
        "status_words": STATUS_WORDS,
    }
    if selected is None:
        return render(request, "usage.html", context, account=account)
    usage = await store.usage(selected.id, window.span_ms, account_id=account.id)
    context["month"] = await _month(request, account, records)
    series = chart_series(usage, window)
    context.update(
        {
            "usage": usage,
            "status": selected.status(now),
            "series": [(_label(t, window.step_ms, long=True), n) for t, n in series],
            "chart": bar_chart(
                series,
                title=f"Requests per {_STEP_WORD[window.step_ms]}, "
                f"{window.title.lower()}, key {selected.name}",
                label=lambda t: _label(t, window.step_ms),
                tick_every=window.tick_every,
            ),
            "step_word": _STEP_WORD[window.step_ms],
            "methods": _methods(usage),
        }
    )
    return render(request, "usage.html", context, account=account)


@login_required
async def usage_export(request: web.Request, account: Account) -> web.StreamResponse:
    """One key's usage per day and method (``store.usageexport``), as CSV or JSON.

    ``key`` must be the account's (404 otherwise), ``window`` one of the page's
    (days are whole UTC days), ``format`` ``csv`` (the default) or ``json``.
    """
    window = {w.name: w for w in WINDOWS}.get(request.query.get("window", ""), _window("30d"))
    key_id = request.query.get("key", "")
    try:
        rows = await export_usage(
            store_of(request), config_of(request), key_id, window.span_ms, account.id
        )
    except NotFound:
        raise web.HTTPNotFound() from None
    name = f"usage-{key_id}-{window.name}"
    if request.query.get("format") == "json":
        return web.Response(body=to_json(rows), content_type="application/json")
    return web.Response(
        text=to_csv(rows),
        content_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


async def _month(
    request: web.Request, account: Account, records: Sequence[KeyRecord]
) -> dict[str, Any]:
    """This month's compute units per key and the estimated cost at the account's plan."""
    insight = InsightStore(store_of(request), config_of(request).plans)
    cost = await insight.month_cost(records, account.plan)
    return {
        "cost": cost,
        "since": cost.since_ms,
        "units": fmt_number(cost.compute_units),
        "price": fmt_money(cost.price_per_million_cu),
        "estimate": fmt_money(cost.estimated_cost),
    }


def chart_series(usage: Usage, window: Window) -> list[tuple[int, int]]:
    """(bucket start ms, requests) at the window's step, oldest first."""
    if window.step_ms == DAY_MS:
        return [(t, totals.get("req", 0)) for t, totals in usage.per_day]
    buckets: dict[int, int] = {}
    for t, n in usage.per_minute:
        start = t - t % window.step_ms
        buckets[start] = buckets.get(start, 0) + n
    return sorted(buckets.items())


async def _selected(
    request: web.Request,
    account: Account,
    records: Sequence[KeyRecord],
    now: int,
    summary: Sequence[dict[str, Any]],
) -> KeyRecord | None:
    """The key asked for (404 unless it is the account's), else the one with the
    most requests in the last 24 hours (the newest active one while none has any):
    the page opens on a key that has something to show."""
    key_id = request.query.get("key", "")
    if key_id:
        try:
            return await store_of(request).get_key(key_id, account.id)
        except NotFound:
            raise web.HTTPNotFound() from None
    busiest = max(summary, key=lambda s: s["total"], default=None)
    if busiest is not None and busiest["total"] > 0:
        record: KeyRecord = busiest["record"]
        return record
    active = [r for r in records if r.status(now) == "active"]
    choices = active or list(records)
    return choices[0] if choices else None


def _methods(usage: Usage) -> list[dict[str, Any]]:
    total = sum(usage.methods.values()) or 1
    return [
        {"method": m, "count": n, "share": round(100 * n / total, 1)}
        for m, n in usage.methods.items()
    ]


def _window(name: str) -> Window:
    return next(w for w in WINDOWS if w.name == name)


def _label(ms: int, step_ms: int, long: bool = False) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    if step_ms == DAY_MS:
        return moment.strftime("%b %d")
    return moment.strftime("%b %d %H:%M UTC" if long else "%H:%M")
