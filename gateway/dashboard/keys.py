"""The API Keys section: list, create (shown once), rotate, revoke.

Every key operation goes through the Store with the logged-in account's
id, so a key id of another account is simply "not found" (404) — the same
answer as a key id that never existed. Revoke and rotate each have a
server-rendered confirmation page, so they work without JavaScript.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from gateway.dashboard.session import store_of
from gateway.dashboard.views import config_of, login_required, own_key, redirect, render, sentence
from gateway.store.accounts import (
    DAY_MS,
    HOUR_MS,
    Account,
    KeyRecord,
    StoreError,
    counts_towards_cap,
)

# (form value, label, milliseconds or None for no expiry)
EXPIRY_CHOICES: tuple[tuple[str, str, int | None], ...] = (
    ("never", "Never", None),
    ("7d", "7 days", 7 * DAY_MS),
    ("30d", "30 days", 30 * DAY_MS),
    ("90d", "90 days", 90 * DAY_MS),
)
GRACE_CHOICES: tuple[tuple[str, str, int], ...] = (
    ("0", "Stop working immediately", 0),
    ("1h", "1 hour", HOUR_MS),
    ("24h", "24 hours", 24 * HOUR_MS),
    ("7d", "7 days", 7 * DAY_MS),
)
DEFAULT_GRACE = "24h"
ENVIRONMENTS = ("production", "staging", "development")
STATUS_WORDS = {"active": "Active", "expired": "Expired", "revoked": "Revoked"}
_SPLIT = re.compile(r"[\s,]+")


@login_required
async def keys_page(request: web.Request, account: Account) -> web.StreamResponse:
    return await _page(request, account)


@login_required
async def create_key(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    store = store_of(request)
    values = _form_values(form)
    expiry = {value: ms for value, _, ms in EXPIRY_CHOICES}
    max_keys = config_of(request).dashboard.max_keys_per_account
    try:
        if values["expires"] not in expiry:
            raise StoreError("choose an expiry from the list")
        key, record = await store.create_key(
            account.id,
            name=values["name"],
            env=values["env"],
            expires_in_ms=expiry[values["expires"]],
            origins=_entries(values["origins"]),
            ips=_entries(values["ips"]),
            methods=_entries(values["methods"]),
            max_keys=max_keys,
        )
    except StoreError as exc:
        return await _page(request, account, form=values, error=sentence(str(exc)), status=400)
    return await _page(request, account, new_key=key, new_record=record)


@login_required
async def confirm_revoke(request: web.Request, account: Account) -> web.StreamResponse:
    record = await own_key(request, account)
    return render(request, "confirm.html", {"action": "revoke", "key": record}, account=account)


@login_required
async def revoke_key(request: web.Request, account: Account) -> web.StreamResponse:
    record = await own_key(request, account)
    await store_of(request).revoke_key(record.id, account_id=account.id)
    return redirect("/dashboard/keys?msg=revoked")


@login_required
async def confirm_rotate(request: web.Request, account: Account) -> web.StreamResponse:
    record = await own_key(request, account)
    return render(
        request,
        "confirm.html",
        {
            "action": "rotate",
            "key": record,
            "grace_choices": GRACE_CHOICES,
            "default_grace": DEFAULT_GRACE,
        },
        account=account,
    )


@login_required
async def rotate_key(request: web.Request, account: Account) -> web.StreamResponse:
    record = await own_key(request, account)
    form = await request.post()
    choices = {value: ms for value, _, ms in GRACE_CHOICES}
    grace = choices.get(str(form.get("grace", DEFAULT_GRACE)), choices[DEFAULT_GRACE])
    try:
        key, new = await store_of(request).rotate_key(
            record.id,
            grace,
            account_id=account.id,
            max_keys=config_of(request).dashboard.max_keys_per_account,
        )
    except StoreError as exc:
        return await _page(request, account, error=sentence(str(exc)), status=409)
    old = await store_of(request).get_key(record.id, account.id)  # now with its grace expiry
    return await _page(request, account, new_key=key, new_record=new, rotated=old)


async def _page(
    request: web.Request,
    account: Account,
    *,
    form: Mapping[str, str] | None = None,
    error: str | None = None,
    new_key: str | None = None,
    new_record: KeyRecord | None = None,
    rotated: KeyRecord | None = None,
    status: int = 200,
) -> web.Response:
    store = store_of(request)
    now = await store.now_ms()
    records = await store.list_keys(account.id)
    rows = [_row(r, now) for r in records]
    active = sum(1 for r in records if counts_towards_cap(r, now))
    context: dict[str, Any] = {
        "rows": rows,
        "form": form or _form_values({}),
        "error": error,
        "new_key": new_key,
        "new_record": new_record,
        "rotated": rotated,
        "expiry_choices": EXPIRY_CHOICES,
        "environments": ENVIRONMENTS,
        "active_count": active,
        "max_keys": config_of(request).dashboard.max_keys_per_account,
        "retention_days": config_of(request).dashboard.inactive_key_retention_s // 86_400,
        "max_inactive": config_of(request).dashboard.max_inactive_keys,
    }
    return render(request, "keys.html", context, account=account, status=status)


def _row(record: KeyRecord, now: int) -> dict[str, Any]:
    status = record.status(now)
    return {
        "record": record,
        "status": status,
        "status_word": STATUS_WORDS[status],
        "can_rotate": status == "active",
        "can_revoke": status != "revoked",
        "in_grace": status == "active" and record.rotated_to is not None,
        "restricted": bool(record.origins or record.ips or record.methods),
    }


def _form_values(form: MultiDictProxy[Any] | Mapping[str, Any]) -> dict[str, str]:
    def get(name: str, default: str = "") -> str:
        value = form.get(name, default)
        return value if isinstance(value, str) else default

    return {
        "name": get("name"),
        "env": get("env"),
        "expires": get("expires", "never"),
        "origins": get("origins"),
        "ips": get("ips"),
        "methods": get("methods"),
    }


def _entries(text: str) -> list[str]:
    """Allowlist entries from a textarea: one per line (commas and spaces work too)."""
    return [item for item in _SPLIT.split(text) if item]
