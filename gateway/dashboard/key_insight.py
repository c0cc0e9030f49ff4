"""A key's own pages: its Limits (the owner's caps) and its Requests (insight, failed calls).

Both are reached from the key's row on the API Keys page. The key is
always looked up with the logged-in account's id, so another account's
key id answers 404 like one that never existed. Writes go through
``KeyLimits`` (gateway/store/keylimits.py), reads through ``InsightStore``.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from gateway.dashboard import keyform
from gateway.dashboard.session import store_of
from gateway.dashboard.views import (
    config_of,
    fmt_number,
    login_required,
    own_key,
    render,
)
from gateway.store.accounts import Account, KeyRecord, StoreError
from gateway.store.insightquery import WINDOWS, InsightStore, fmt_ms
from gateway.store.keylimits import KeyLimits, fmt_rate, parse_daily, parse_rate

# Words for the JSON-RPC codes the gateway itself answers with.
CODE_WORDS = {
    -32700: "Parse error",
    -32600: "Invalid request",
    -32601: "Method not found",
    -32602: "Invalid params",
    -32603: "Internal or upstream error",
    -32001: "Key refused",
    -32005: "Rate limited",
}
MAX_FILTER = 64  # longest method name or code accepted as a filter
LOG_PAGE = 25  # failed calls shown per page (the log keeps insight.log_cap)


def _limits(request: web.Request) -> KeyLimits:
    return KeyLimits(store_of(request), config_of(request).plans)


async def _limits_context(
    request: web.Request, account: Account, record: KeyRecord, posted: dict[str, str] | None
) -> dict[str, Any]:
    try:
        plan = _limits(request).plan_of(record)
    except StoreError:
        raise web.HTTPNotFound() from None
    form = posted or {
        "rate": "" if record.rate_cap is None else fmt_rate(record.rate_cap),
        "daily_cu": "" if record.daily_cu_cap is None else str(record.daily_cu_cap),
    }
    return {
        "plan": plan,
        "plan_rate": fmt_number(plan.rate),
        "plan_quota": fmt_number(plan.daily_quota) if plan.daily_quota else None,
        "form": form,
    }


async def _write_limits(
    request: web.Request, account: Account, record: KeyRecord, form: dict[str, str]
) -> None:
    rate, daily_cu = parse_rate(form["rate"]), parse_daily(form["daily_cu"])
    await _limits(request).set_key_limits(account.id, record.id, rate=rate, daily_cu=daily_cu)


limits_page, save_limits = keyform.views(
    "key_limits.html", _limits_context, {"rate": 32, "daily_cu": 32}, _write_limits, "limits"
)


@login_required
async def requests_page(request: web.Request, account: Account) -> web.StreamResponse:
    record = await own_key(request, account)
    insight = InsightStore(store_of(request), config_of(request).plans)
    method = request.query.get("method", "").strip()[:MAX_FILTER]
    code_text = request.query.get("code", "").strip()[:MAX_FILTER]
    code: int | None = None
    error = None
    if code_text:
        try:
            code = int(code_text)
        except ValueError:
            error = f"“{code_text}” is not an error code; codes are whole numbers such as -32005."
    cap = config_of(request).insight.log_cap
    everything = await insight.calls(record.id, account_id=account.id, limit=cap)
    matching = [
        c
        for c in everything
        if (not method or c.method == method) and (code is None or c.code == code)
    ]
    pages = max(1, math.ceil(len(matching) / LOG_PAGE))
    try:
        page = min(max(1, int(request.query.get("page", "1"))), pages)
    except ValueError:
        page = 1
    shown = matching[(page - 1) * LOG_PAGE : page * LOG_PAGE]
    tables = [
        {
            "name": name,
            "title": title,
            "rows": await insight.methods(record.id, name, account_id=account.id),
        }
        for name, (title, _) in WINDOWS.items()
    ]
    context: dict[str, Any] = {
        "key": record,
        "tables": tables,
        "calls": shown,
        "page": page,
        "pages": pages,
        "matching": len(matching),
        "page_query": _page_query(method, code_text),
        "total_logged": len(everything),
        "log_cap": cap,
        "method": method,
        "code": code_text,
        "error": error,
        "known_methods": sorted({c.method for c in everything}),
        "known_codes": sorted({c.code for c in everything if c.code}),
        "code_words": CODE_WORDS,
        "fmt_ms": fmt_ms,
    }
    return render(request, "key_requests.html", context, account=account)


def _page_query(method: str, code: str) -> str:
    """The filters as a query string prefix for the page links (``method=x&``)."""
    parts = {k: v for k, v in (("method", method), ("code", code)) if v}
    return urlencode(parts) + "&" if parts else ""
