"""The plan page: what each plan allows, and the switch between them.

The plan belongs to the account; ``Store.set_plan`` writes it into every
key record, and the admission script reads the record on each request, so
a switch takes effect from every key's next request. No card is asked for.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.config import PlanConfig
from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of, fmt_number, login_required, redirect, render
from gateway.store.accounts import Account
from gateway.store.insightquery import fmt_money


@login_required
async def plan_page(request: web.Request, account: Account) -> web.StreamResponse:
    cfg = config_of(request)
    plans = [describe(p) for p in cfg.plans]
    keys = await store_of(request).list_keys(account.id)
    context = {
        "plans": plans,
        "key_count": len(keys),
        "first": describe(cfg.plan(cfg.default_plan)),
    }
    return render(request, "plan.html", context, account=account)


@login_required
async def switch_plan(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    name = str(form.get("plan", ""))
    if name not in {p.name for p in config_of(request).plans}:
        raise web.HTTPNotFound()
    if name == account.plan:
        return redirect("/dashboard/plan?msg=same-plan")
    await store_of(request).set_plan(account.id, name)
    return redirect("/dashboard/plan?msg=plan")


# What a dapp sends most: its weight says how many sends a second a plan allows.
SEND = "eth_sendRawTransaction"


def sends_per_second(plan: PlanConfig) -> str:
    """About how many raw transactions a second the plan's rate pays for ("about 3")."""
    weight = plan.weights.get(SEND, 1) or 1
    return fmt_number(int(plan.rate // weight) if plan.rate >= weight else plan.rate / weight)


def describe(plan: PlanConfig) -> dict[str, Any]:
    """A plan as the page lists it: ceilings in units (what a call costs), with what
    they buy in plain calls and in sends, so "25" is not read as 25 transactions."""
    weights = sorted((m, w) for m, w in plan.weights.items() if w != 1)
    return {
        "name": plan.name,
        "title": plan.title,
        "rate": fmt_number(plan.rate),
        "burst": fmt_number(plan.burst),
        "send_weight": fmt_number(plan.weights.get(SEND, 1)),
        "sends": sends_per_second(plan),
        "quota": fmt_number(plan.daily_quota) if plan.daily_quota else None,
        "weights": [(m, fmt_number(w)) for m, w in weights],
        "price": fmt_money(plan.price_per_million_cu) if plan.price_per_million_cu else None,
    }
