"""A key's Transactions page: the owner's "Private transactions" choice and the key's log.

The choice is written through ``gateway.store.keytx`` (the same call as
``gateway keys update --private-tx``), which tells every gateway process at
once; the form carries the CSRF token like every other form. The log shows
each raw transaction's hash, the route it took and who accepted it, never
its bytes. The key is looked up with the logged-in account's id, so
another account's key id answers 404.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.dashboard import keyform
from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of, login_required, render
from gateway.store.accounts import Account, KeyRecord
from gateway.store.keytx import recent_transactions, set_private_tx

CHOICES = (
    ("off", "Off: the plan's route"),
    ("on", "On: only private endpoints (builders, relays), never the public mempool"),
    ("fallback", "On, with fallback: the public nodes only if every private endpoint fails"),
)


@login_required
async def tx_page(request: web.Request, account: Account) -> web.StreamResponse:
    return await keyform.show(request, account, _page)


@login_required
async def save_tx(request: web.Request, account: Account) -> web.StreamResponse:
    async def write(account: Account, record: KeyRecord, form: dict[str, str]) -> None:
        await set_private_tx(store_of(request), account.id, record.id, form["private_tx"])

    return await keyform.save(request, account, _page, {"private_tx": 16}, write, "transactions")


async def _page(
    request: web.Request,
    account: Account,
    record: KeyRecord,
    *,
    form: dict[str, str] | None = None,
    error: str | None = None,
    saved: bool = False,
    status: int = 200,
) -> web.Response:
    cfg = config_of(request)
    try:
        plan = cfg.plan(record.plan)
    except KeyError:
        raise web.HTTPNotFound() from None
    entries = await recent_transactions(store_of(request), account.id, record.id)
    context: dict[str, Any] = {
        "key": record,
        "plan": plan,
        "choice": (form or {}).get("private_tx") or record.private_tx or "off",
        "choices": CHOICES,
        "private_networks": [n.name for n in cfg.networks if n.private_tx],
        "entries": entries,
        "error": error,
        "saved": saved,
    }
    return render(request, "key_tx.html", context, account=account, status=status)
