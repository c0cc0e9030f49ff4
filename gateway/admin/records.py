"""``/admin/accounts`` and ``/admin/keys``: what ``gateway accounts`` and ``gateway keys`` do.

The same store calls and so the same rules (email shape, plan names, the
per-account key cap, origin/IP/method lists, the caps a key may have),
answered as JSON:

* ``GET /admin/accounts``; ``POST /admin/accounts`` ``{email, password, plan?}``;
  ``GET|PATCH|DELETE /admin/accounts/<email>`` (PATCH ``{plan}``; DELETE
  erases it as the dashboard's "Delete account" does: its keys revoked first);
* ``GET /admin/keys?account=<email>``; ``POST /admin/keys`` ``{account,
  name?, env?, expires_in_ms?, origins?, ips?, methods?}`` answers the new
  key once (``key``: only its hash is kept); ``GET|PATCH|DELETE
  /admin/keys/<id>`` (PATCH ``{rate_cap, daily_cu_cap}``, null for the
  plan's; DELETE revokes on every process); ``POST /admin/keys/<id>/rotate``
  ``{grace_ms?}`` (default 24 h) answers the new key once.

The audit log names the target (an email, a key id), never a key or a password.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway import typedefs as T
from gateway.admin.calls import admin_source, answer, audit, body_of
from gateway.store.accountlist import list_accounts
from gateway.store.accounts import Store, StoreError
from gateway.store.keylimits import KeyLimits
from gateway.store.security import SecurityStore

_DAY_MS = 86_400_000


def add_record_routes(admin: web.Application) -> None:
    r = admin.router
    r.add_get("/accounts", accounts)
    r.add_post("/accounts", create_account)
    r.add_get("/accounts/{email}", account)
    r.add_patch("/accounts/{email}", patch_account)
    r.add_delete("/accounts/{email}", delete_account)
    r.add_get("/keys", keys)
    r.add_post("/keys", create_key)
    r.add_get("/keys/{key_id}", key)
    r.add_patch("/keys/{key_id}", patch_key)
    r.add_delete("/keys/{key_id}", revoke_key)
    r.add_post("/keys/{key_id}/rotate", rotate_key)


def _store(request: web.Request) -> Store:
    return admin_source(request)[T.STORE]


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise StoreError(f"{name}: expected a string")
    return value


def _texts(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StoreError(f"{name}: expected a list of strings")
    return value


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreError(f"{name}: expected a number or null")
    return value


def _account_json(acct: Any) -> dict[str, Any]:
    return {"id": acct.id, "email": acct.email, "plan": acct.plan, "created_at": acct.created_at}


# -- accounts ----------------------------------------------------------------------
async def accounts(request: web.Request) -> web.Response:
    rows, _ = await list_accounts(_store(request))
    return answer({"accounts": rows})


async def create_account(request: web.Request) -> web.Response:
    body = await body_of(request)
    email, password = _text(body, "email"), _text(body, "password")
    plan = body.get("plan")
    if plan is not None and not isinstance(plan, str):
        raise StoreError("plan: expected a string")
    acct = await _store(request).create_account(email, password, plan)
    audit(request, "account.create", acct.email, plan=acct.plan)
    return answer(_account_json(acct), 201)


async def account(request: web.Request) -> web.Response:
    store = _store(request)
    acct = await store.account_by_email(request.match_info["email"])
    now = await store.now_ms()
    recs = await store.list_keys(acct.id)
    return answer({**_account_json(acct), "keys": [r.as_json(now) for r in recs]})


async def patch_account(request: web.Request) -> web.Response:
    body = await body_of(request)
    store = _store(request)
    acct = await store.account_by_email(request.match_info["email"])
    if "plan" not in body:
        raise StoreError("nothing to change: PATCH takes {plan}")
    acct = await store.set_plan(acct.id, _text(body, "plan"))
    audit(request, "account.plan", acct.email, plan=acct.plan)
    return answer(_account_json(acct))


async def delete_account(request: web.Request) -> web.Response:
    store = _store(request)
    acct = await store.account_by_email(request.match_info["email"])
    revoked = await SecurityStore(store).delete_account(acct)
    audit(request, "account.delete", acct.email, keys_revoked=revoked)
    return answer({"id": acct.id, "email": acct.email, "deleted": True, "keys_revoked": revoked})


# -- keys --------------------------------------------------------------------------
async def keys(request: web.Request) -> web.Response:
    email = request.query.get("account")
    if not email:
        raise StoreError("account: give ?account=<email>")
    store = _store(request)
    acct = await store.account_by_email(email)
    now = await store.now_ms()
    return answer({"keys": [r.as_json(now) for r in await store.list_keys(acct.id)]})


async def create_key(request: web.Request) -> web.Response:
    body = await body_of(request)
    store = _store(request)
    acct = await store.account_by_email(_text(body, "account"))
    expires = body.get("expires_in_ms")
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int)):
        raise StoreError("expires_in_ms: expected an integer (milliseconds) or null")
    secret, rec = await store.create_key(
        acct.id,
        name=_text(body, "name", ""),
        env=_text(body, "env", ""),
        expires_in_ms=expires,
        origins=_texts(body, "origins"),
        ips=_texts(body, "ips"),
        methods=_texts(body, "methods"),
    )
    audit(request, "key.create", rec.id, account=acct.email)
    return answer({**rec.as_json(await store.now_ms()), "key": secret}, 201)


async def key(request: web.Request) -> web.Response:
    store = _store(request)
    rec = await store.get_key(request.match_info["key_id"])
    return answer(rec.as_json(await store.now_ms()))


async def patch_key(request: web.Request) -> web.Response:
    """The key's own caps, as ``gateway keys limit`` sets them (null: the plan's)."""
    body = await body_of(request)
    store = _store(request)
    key_id = request.match_info["key_id"]
    if not {"rate_cap", "daily_cu_cap"} & body.keys():
        raise StoreError("nothing to change: PATCH takes {rate_cap, daily_cu_cap}")
    record = await store.get_key(key_id)
    rate = _number(body, "rate_cap") if "rate_cap" in body else record.rate_cap
    daily = _number(body, "daily_cu_cap") if "daily_cu_cap" in body else record.daily_cu_cap
    if daily is not None and daily != int(daily):
        raise StoreError("daily_cu_cap: expected a whole number")
    plans = admin_source(request)[T.CONFIG].plans
    rec = await KeyLimits(store, plans).set_key_limits(
        None, key_id, rate=rate, daily_cu=None if daily is None else int(daily)
    )
    audit(request, "key.limit", rec.id, rate_cap=rec.rate_cap, daily_cu_cap=rec.daily_cu_cap)
    return answer(rec.as_json(await store.now_ms()))


async def revoke_key(request: web.Request) -> web.Response:
    store = _store(request)
    rec = await store.revoke_key(request.match_info["key_id"])
    audit(request, "key.revoke", rec.id)
    return answer(rec.as_json(await store.now_ms()))


async def rotate_key(request: web.Request) -> web.Response:
    body = await body_of(request)
    grace = body.get("grace_ms", _DAY_MS)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise StoreError("grace_ms: expected a whole number of milliseconds, 0 or more")
    store = _store(request)
    old = request.match_info["key_id"]
    secret, rec = await store.rotate_key(old, grace)
    audit(request, "key.rotate", old, new_key_id=rec.id, grace_ms=grace)
    value = {**rec.as_json(await store.now_ms()), "key": secret, "replaces": old}
    return answer(value, 201)
