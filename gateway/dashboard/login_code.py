"""The log-in's second step: the "Code" page for accounts with two-step log-in.

After a right password the log-in view calls ``begin`` instead of starting a
session. The browser gets a short-lived, HttpOnly cookie naming a pending
log-in in Redis (only its hash is stored) and is sent to the Code page.
A right code (an authenticator code, each used once, or a recovery code,
spent on use) starts the session; too many wrong codes end the pending
log-in, so the password must be typed again, and wrong codes also count
towards the per-email log-in throttle, so the code cannot be guessed
faster than the password.
"""

from __future__ import annotations

from aiohttp import web

from gateway.dashboard import throttle
from gateway.dashboard.session import COOKIE_PATH, log_in, store_of, visitor_of
from gateway.dashboard.session_tracking import security_of
from gateway.dashboard.views import config_of, redirect, render, safe_next
from gateway.rpc.handler import client_ip
from gateway.store.accounts import NotFound
from gateway.store.security import SecurityStore

PENDING_COOKIE = "gw_login2"
CODE_PAGE = "/dashboard/login/code"


async def wanted(request: web.Request, account_id: str) -> bool:
    """Whether this account's log-in needs the second step."""
    on, _ = await security_of(request).totp_state(account_id)
    return on


async def begin(request: web.Request, account_id: str, next_path: str) -> web.StreamResponse:
    """Park the log-in and send the browser to the Code page."""
    ttl = config_of(request).dashboard.login_code_ttl_s
    token = await security_of(request).begin_pending_login(account_id, next_path, ttl)
    response = redirect(CODE_PAGE)
    response.set_cookie(
        PENDING_COOKIE,
        token,
        max_age=ttl,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=config_of(request).dashboard.secure_cookies or None,
    )
    return response


async def code_page(request: web.Request) -> web.StreamResponse:
    if visitor_of(request).logged_in:
        return redirect("/dashboard/keys")
    pending = await security_of(request).pending_login(request.cookies.get(PENDING_COOKIE, ""))
    if pending is None:
        return _expired()
    return render(request, "login_code.html", {})


async def submit_code(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    value = form.get("code", "")
    code = value if isinstance(value, str) else ""
    sec = security_of(request)
    token = request.cookies.get(PENDING_COOKIE, "")
    pending = await sec.pending_login(token)
    if pending is None:
        return _expired()
    store = store_of(request)
    try:
        account = await store.account(pending.account_id)
    except NotFound:  # erased while the code page was open
        return _expired()
    ip = client_ip(request)
    limits = config_of(request).dashboard
    # Count the try BEFORE the code is checked (one HINCRBY), so parallel
    # guesses cannot all be checked: at most login_code_attempts codes per
    # password entry.
    tries = await sec.pending_login_try(token)
    if tries > limits.login_code_attempts:
        return await _start_over(request, sec, token, account.email, pending.next)
    if await sec.check_second_factor(pending.account_id, code):
        await sec.end_pending_login(token)
        await throttle.login_succeeded(store, limits, account.email, ip)
        response = redirect(safe_next(pending.next))
        response.del_cookie(PENDING_COOKIE, path=COOKIE_PATH)
        await log_in(request, response, pending.account_id)
        return response
    # A wrong code also counts as a failed log-in of this email and IP, so
    # guesses add up across password entries (the try counter above already
    # bounds how many of them can run in parallel).
    await throttle.login_attempt_wait_s(store, limits, account.email, ip)
    if tries >= limits.login_code_attempts:
        return await _start_over(request, sec, token, account.email, pending.next)
    return render(
        request,
        "login_code.html",
        {"error": "That code is not right. Try the newest code from your app."},
        status=401,
    )


_TOO_MANY = "Too many wrong codes. Log in with your password again."


def _expired() -> web.StreamResponse:
    """No pending log-in (expired, used up, or never started): back to the password."""
    response = redirect("/dashboard/login")
    response.del_cookie(PENDING_COOKIE, path=COOKIE_PATH)
    return response


async def _start_over(
    request: web.Request, sec: SecurityStore, token: str, email: str, next_: str
) -> web.StreamResponse:
    """Too many wrong codes: the half-finished log-in ends; the password is asked again."""
    await sec.end_pending_login(token)
    response = render(
        request,
        "login.html",
        {"email": email, "next": next_, "error": _TOO_MANY},
        status=401,
    )
    response.del_cookie(PENDING_COOKIE, path=COOKIE_PATH)
    return response
