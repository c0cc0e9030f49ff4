"""Who is asking: the server-side session behind the dashboard cookie.

The cookie holds only a random session id; the account it belongs to and
its CSRF token live in Redis (``Store.create_session``), so logging out
kills the session everywhere and a stolen-then-expired cookie is worthless.
Visitors who are not logged in get a CSRF token in a cookie of their own
(double-submit), so the sign-up and log-in forms are protected without
storing anything in Redis for anonymous traffic.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import typedefs as T
from gateway.store.accounts import Store

SESSION_COOKIE = "gw_session"
CSRF_COOKIE = "gw_csrf"
COOKIE_PATH = "/dashboard"
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class Visitor:
    """The request's session state, read once by the middleware."""

    session_id: str | None  # set when logged in
    account_id: str | None  # set when logged in
    csrf: str  # the token forms carry and state changes must send back
    fresh_csrf: bool = False  # an anonymous token made for this request (cookie to set)
    stale_cookie: bool = False  # a session cookie Redis no longer knows (clear it)

    @property
    def logged_in(self) -> bool:
        return self.account_id is not None


VISITOR = web.RequestKey("dashboard_visitor", Visitor)


def store_of(request: web.Request) -> Store:
    """The shared Store; fails loudly when the app's Redis context never ran."""
    try:
        return request.config_dict[T.STORE]
    except KeyError:
        raise RuntimeError(
            "the dashboard needs the gateway app's Store "
            "(create the app with gateway.app.create_app)"
        ) from None


def visitor_of(request: web.Request) -> Visitor:
    try:
        return request[VISITOR]
    except KeyError:
        raise RuntimeError("dashboard session middleware did not run") from None


@web.middleware
async def session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Resolve the cookie to a ``Visitor`` before the view; fix cookies after it."""
    if request.path.startswith(COOKIE_PATH + "/static/"):
        return await handler(request)  # files need no session (and no Redis call)
    visitor = await _load(request)
    request[VISITOR] = visitor
    response = await handler(request)
    if response.prepared:  # pragma: no cover - no dashboard view streams
        return response
    current = request[VISITOR]  # a view may have logged in or out
    if current.stale_cookie and current.session_id is None:
        response.del_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    if current.fresh_csrf and not current.logged_in:
        _set_cookie(request, response, CSRF_COOKIE, current.csrf, max_age=None, samesite="Strict")
    return response


async def _load(request: web.Request) -> Visitor:
    session_id = request.cookies.get(SESSION_COOKIE, "")
    stale = False
    if session_id:
        found = await store_of(request).session(session_id)
        if found is not None:
            account_id, csrf = found
            return Visitor(session_id, account_id, csrf)
        stale = True
    token = request.cookies.get(CSRF_COOKIE, "")
    if _TOKEN_SHAPE.fullmatch(token):
        return Visitor(None, None, token, stale_cookie=stale)
    return Visitor(None, None, secrets.token_urlsafe(32), fresh_csrf=True, stale_cookie=stale)


async def log_in(request: web.Request, response: web.StreamResponse, account_id: str) -> None:
    """Start a session with a NEW id (any earlier one is killed: no fixation)."""
    store = store_of(request)
    old = request[VISITOR]
    if old.session_id:
        await store.end_session(old.session_id)
    max_age = request.config_dict[T.CONFIG].dashboard.session_max_age_s
    session_id, csrf = await store.create_session(account_id, max_age)
    request[VISITOR] = Visitor(session_id, account_id, csrf)
    _set_cookie(request, response, SESSION_COOKIE, session_id, max_age=max_age, samesite="Lax")
    response.del_cookie(CSRF_COOKIE, path=COOKIE_PATH)


async def log_out(request: web.Request, response: web.StreamResponse) -> None:
    """Delete the session in Redis and the cookie in the browser."""
    old = request[VISITOR]
    if old.session_id:
        await store_of(request).end_session(old.session_id)
    request[VISITOR] = Visitor(None, None, secrets.token_urlsafe(32), fresh_csrf=True)
    response.del_cookie(SESSION_COOKIE, path=COOKIE_PATH)


def _set_cookie(
    request: web.Request,
    response: web.StreamResponse,
    name: str,
    value: str,
    *,
    max_age: int | None,
    samesite: str,
) -> None:
    secure = request.config_dict[T.CONFIG].dashboard.secure_cookies
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite=samesite,
        secure=secure or None,
    )
