"""The Alerts page: the account's webhooks (secret shown once), its rules, each
webhook's delivery log and a "Send test" button.

Plain forms (no script): every change is a POST that redirects back, except
adding a webhook, which answers the page itself with the new secret on it,
as the API Keys page does with a new key. All of it goes through
``gateway.alerts.api``, the same functions the admin API calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from gateway.alerts import api
from gateway.alerts.rules import DEFAULT_WINDOW_S, RULES, describe
from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of, login_required, redirect, render, sentence
from gateway.store.accounts import Account, NotFound, StoreError

PAGE = "/dashboard/alerts"
RULE_CHOICES = (
    ("quota_percent", "Daily quota reached (%)", 80),
    ("rate_limited", "Rate-limited calls (more than)", 50),
    ("key_expiring_days", "Key expires within (days)", 7),
    ("error_percent", "Errors above (% of calls)", 10),
)
WINDOW_CHOICES = ((60, "1 minute"), (300, "5 minutes"), (900, "15 minutes"), (3600, "1 hour"))
STATUS_WORDS = {
    "pending": "Retrying",
    "delivered": "Delivered",
    "failed": "Failed",
    "dropped": "Dropped",
}


@login_required
async def alerts_page(request: web.Request, account: Account) -> web.StreamResponse:
    return await _page(request, account)


@login_required
async def add_webhook(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    url = str(form.get("url", ""))
    cfg = config_of(request).alerts
    try:
        created = await api.create_webhook(store_of(request), cfg, account.id, url)
    except StoreError as exc:
        return await _page(request, account, url=url, error=sentence(str(exc)), status=400)
    return await _page(request, account, created=created)


@login_required
async def remove_webhook(request: web.Request, account: Account) -> web.StreamResponse:
    await _or_404(api.delete_webhook(store_of(request), account.id, _id(request)))
    return redirect(PAGE + "?msg=webhook-removed")


@login_required
async def test_webhook(request: web.Request, account: Account) -> web.StreamResponse:
    cfg = config_of(request).alerts
    await _or_404(api.send_test(store_of(request), cfg, account.id, _id(request)))
    return redirect(PAGE + "?msg=test-queued")


@login_required
async def add_rule(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    values = {k: str(form.get(k, "")) for k in ("rule", "threshold", "window_s")}
    cfg = config_of(request).alerts
    try:
        await api.create_rule(
            store_of(request),
            cfg,
            account.id,
            values["rule"],
            values["threshold"],
            values["window_s"] or None,
        )
    except StoreError as exc:
        return await _page(request, account, rule_form=values, error=sentence(str(exc)), status=400)
    return redirect(PAGE + "?msg=rule-added")


@login_required
async def remove_rule(request: web.Request, account: Account) -> web.StreamResponse:
    await _or_404(api.delete_rule(store_of(request), account.id, _id(request)))
    return redirect(PAGE + "?msg=rule-removed")


def _id(request: web.Request) -> str:
    return request.match_info["item_id"]


async def _or_404(work: Any) -> Any:
    try:
        return await work
    except NotFound:
        raise web.HTTPNotFound() from None


async def _page(
    request: web.Request,
    account: Account,
    *,
    created: Mapping[str, Any] | None = None,
    url: str = "",
    rule_form: Mapping[str, str] | None = None,
    error: str = "",
    status: int = 200,
) -> web.StreamResponse:
    cfg = config_of(request).alerts
    store = store_of(request)
    webhooks = await api.list_webhooks(store, cfg, account.id)
    for hook in webhooks:
        for row in hook["deliveries"]:
            row["status_word"] = STATUS_WORDS.get(row["status"], row["status"])
            row["what"] = "Test" if row["rule"] == "test" else row["rule"]
    context = {
        "enabled": cfg.enabled,
        "webhooks": webhooks,
        "rules": await api.list_rules(store, account.id),
        "created": created,
        "url": url,
        "rule_form": rule_form or {"rule": "rate_limited", "threshold": "", "window_s": ""},
        "rule_choices": RULE_CHOICES,
        "window_choices": WINDOW_CHOICES,
        "default_window": DEFAULT_WINDOW_S,
        "windowed": [name for name, kind in RULES.items() if kind.windowed],
        "example": describe("rate_limited", 50, DEFAULT_WINDOW_S),
        "http_allowed": cfg.allow_private_targets,
        "max_webhooks": cfg.max_webhooks,
        "max_rules": cfg.max_rules,
        "error": error,
    }
    return render(request, "alerts.html", context, account=account, status=status)
