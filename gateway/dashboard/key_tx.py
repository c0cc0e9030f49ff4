"""A key's Transactions page: the owner's "Private transactions" choice and the key's log.

The choice is written through ``gateway.store.keytx`` (the same call as
``gateway keys update --private-tx``), which tells every gateway process at
once; the form carries the CSRF token like every other form. The log shows
each raw transaction's hash, the route it took, who accepted it, its outcome
(followed until it lands for a private one: included in a block, replaced,
given up) and (when nobody took it) the reason, never its bytes: one entry a
block of label and value, so it fits a phone and a laptop alike and a new
field is a line of ``LOG_FIELDS``. The key is looked up with the logged-in
account's id, so another account's key id answers 404. The same form carries
the key's bundle options (``noMerge``, ``positionFirst`` for BlockRazor,
``mev_builders`` for bloXroute), saved with ``gateway.store.keytx`` as
``gateway keys update --no-merge / --position-first / --mev-builders`` does.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.dashboard import keyform
from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of
from gateway.store.accounts import Account, KeyRecord
from gateway.store.keytx import (
    bundle_options,
    recent_transactions,
    set_bundle_options,
    set_private_tx,
)

# The log's fields, in the order shown: (the txlog entry's field, its label, how it is
# shown: "time", "code" or "text"). A field the log gains is one line here; an entry
# without it (written before) shows the rest.
LOG_FIELDS = (
    ("time", "Time", "time"),
    ("method", "Method", "text"),
    ("hash", "Hash", "code"),
    ("route", "Route", "text"),
    ("accepted_by", "Accepted by", "text"),
    ("outcome", "Outcome", "text"),
    ("reason", "Reason", "text"),
)

CHOICES = (
    ("off", "Off: the plan's route"),
    ("on", "On: only private endpoints (builders, relays), never the public mempool"),
    ("fallback", "On, with fallback: the public nodes only if every private endpoint fails"),
)


async def _context(
    request: web.Request, account: Account, record: KeyRecord, posted: dict[str, str] | None
) -> dict[str, Any]:
    cfg = config_of(request)
    try:
        plan = cfg.plan(record.plan)
    except KeyError:
        raise web.HTTPNotFound() from None
    return {
        "plan": plan,
        "choice": record.private_tx or "off",  # a refused post changes nothing to show
        "choices": CHOICES,
        "private_networks": [n.name for n in cfg.networks if n.private_tx],
        "entries": _shown(await recent_transactions(store_of(request), account.id, record.id)),
        "bundle": await bundle_options(store_of(request), account.id, record.id),
    }


def _shown(entries: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Each entry as the page lists it: its outcome, and (field, label, kind, value)
    for every field it has; nobody having accepted it reads "none"."""
    shown = []
    for entry in entries:
        values = entry | {"accepted_by": entry.get("accepted_by") or "none"}
        fields = [(n, label, kind, values[n]) for n, label, kind in LOG_FIELDS if values.get(n)]
        shown.append({"outcome": entry.get("outcome", ""), "fields": fields})
    return shown


async def _write(
    request: web.Request, account: Account, record: KeyRecord, form: dict[str, str]
) -> None:
    store = store_of(request)
    await set_private_tx(store, account.id, record.id, form["private_tx"])
    await set_bundle_options(
        store,
        account.id,
        record.id,
        no_merge=form["no_merge"] == "on",
        position_first=form["position_first"] == "on",
        mev_builders=form["mev_builders"].split(","),
    )


FIELDS = {"private_tx": 16, "no_merge": 4, "position_first": 4, "mev_builders": 600}
tx_page, save_tx = keyform.views("key_tx.html", _context, FIELDS, _write, "transactions")
