"""Sign up, log in, log out.

Passwords are checked by the Store (argon2); this module only adds the web
parts: throttling failed attempts, rotating the session id on log-in, and
killing the session server-side on log-out.
"""

from __future__ import annotations

from aiohttp import web

from gateway.accounts import AlreadyExists, StoreError
from gateway.dashboard import login_code, throttle
from gateway.dashboard.session import log_in, log_out, store_of, visitor_of
from gateway.dashboard.views import redirect, render, safe_next, sentence
from gateway.handlers import client_ip

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

    wait = await throttle.signup_wait_s(store, client_ip(request))
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

    wait = await throttle.login_wait_s(store, email, ip)
    if wait:
        response = again(f"Too many failed log-ins. Try again in {_minutes(wait)}.", 429)
        response.headers["Retry-After"] = str(wait)
        return response
    account = None
    if 0 < len(password) <= MAX_PASSWORD:
        account = await store.verify_password(email, password)
    if account is None:
        await throttle.login_failed(store, email, ip)
        return again("Wrong email or password.", 401)
    await throttle.login_succeeded(store, email)
    if await login_code.wanted(request, account.id):  # two-step log-in: the Code page next
        return await login_code.begin(request, account.id, target)
    response = redirect(target)
    await log_in(request, response, account.id)
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    response = redirect("/dashboard/login?msg=logged-out")
    await log_out(request, response)
    return response


def _minutes(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
