"""Sign up, log in, log out.

Passwords are checked by the Store (argon2, in a bounded thread pool); this
module only adds the web parts: counting attempts before any password is
checked, rotating the session id on log-in, and killing the session
server-side on log-out.
"""

from __future__ import annotations

from aiohttp import web

from gateway.dashboard import login_code, throttle
from gateway.dashboard.session import log_in, log_out, store_of, visitor_of
from gateway.dashboard.views import config_of, redirect, render, safe_next, sentence
from gateway.rpc.handler import client_ip
from gateway.store.accounts import AlreadyExists, Busy, StoreError

MAX_PASSWORD = 1024  # argon2 is happy with more; a cap keeps hashing bounded
MIN_PASSWORD = 8


async def signup_page(request: web.Request) -> web.StreamResponse:
    if visitor_of(request).logged_in:
        return redirect("/dashboard/keys")
    return render(request, "signup.html", {"email": "", "min_password": MIN_PASSWORD})


async def signup(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    email = str(form.get("email", "")).strip()
    password = str(form.get("password", ""))
    store = store_of(request)

    def again(error: str, status: int = 400) -> web.Response:
        return render(
            request,
            "signup.html",
            {"email": email, "error": error, "min_password": MIN_PASSWORD},
            status=status,
        )

    wait = await throttle.signup_wait_s(store, config_of(request).dashboard, client_ip(request))
    if wait:
        response = again(
            f"Too many sign-ups from your network. Try again in {_minutes(wait)}.", 429
        )
        response.headers["Retry-After"] = str(wait)
        return response
    if len(password) > MAX_PASSWORD:
        return again(f"The password must have at most {MAX_PASSWORD} characters.")
    try:
        account = await store.create_account(email, password)
    except AlreadyExists:
        return again("An account with that email already exists. Log in instead.", 409)
    except Busy as exc:
        return _busy(again(sentence(str(exc)), 503))
    except StoreError as exc:
        return again(sentence(str(exc)))
    response = redirect("/dashboard/keys?msg=welcome")
    await log_in(request, response, account.id)
    return response


async def login_page(request: web.Request) -> web.StreamResponse:
    if visitor_of(request).logged_in:
        return redirect(safe_next(request.query.get("next", "")))
    return render(
        request, "login.html", {"email": "", "next": safe_next(request.query.get("next", ""))}
    )


async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    email = str(form.get("email", "")).strip()
    password = str(form.get("password", ""))
    target = safe_next(str(form.get("next", "")))
    store = store_of(request)
    ip = client_ip(request)

    def again(error: str, status: int) -> web.Response:
        return render(
            request, "login.html", {"email": email, "next": target, "error": error}, status=status
        )

    limits = config_of(request).dashboard
    wait = await throttle.login_attempt_wait_s(store, limits, email, ip)  # counted from here
    if wait:
        response = again(f"Too many failed log-ins. Try again in {_minutes(wait)}.", 429)
        response.headers["Retry-After"] = str(wait)
        return response
    account = None
    if 0 < len(password) <= MAX_PASSWORD:
        try:
            account = await store.verify_password(email, password)
        except Busy as exc:
            return _busy(again(sentence(str(exc)), 503))
    if account is None:
        return again("Wrong email or password.", 401)
    if await login_code.wanted(request, account.id):  # two-step log-in: the Code page next
        return await login_code.begin(request, account.id, target)  # counters settle there
    await throttle.login_succeeded(store, limits, email, ip)
    response = redirect(target)
    await log_in(request, response, account.id)
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    response = redirect("/dashboard/login?msg=logged-out")
    await log_out(request, response)
    return response


def _busy(response: web.Response) -> web.Response:
    response.headers["Retry-After"] = "5"
    return response


def _minutes(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
