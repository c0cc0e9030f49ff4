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
    plans = [describe(p) for p in config_of(request).plans]
    keys = await store_of(request).list_keys(account.id)
    return render(request, "plan.html", {"plans": plans, "key_count": len(keys)}, account=account)


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


def describe(plan: PlanConfig) -> dict[str, Any]:
    """A plan as the page lists it: ceilings in words users compare across providers."""
    weights = sorted((m, w) for m, w in plan.weights.items() if w != 1)
    return {
        "name": plan.name,
        "title": plan.title,
        "rate": fmt_number(plan.rate),
        "burst": fmt_number(plan.burst),
        "quota": fmt_number(plan.daily_quota) if plan.daily_quota else None,
        "weights": [(m, fmt_number(w)) for m, w in weights],
        "price": fmt_money(plan.price_per_million_cu) if plan.price_per_million_cu else None,
    }
