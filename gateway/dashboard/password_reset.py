"""The page behind ``gateway accounts reset-password EMAIL`` links.

The link carries a one-time token in its query string (the access log
prints paths without queries, so the token never reaches a log). Opening
the link spends nothing; setting the new password spends it (GETDEL), ends
every session of the account and sends the browser to the log-in page.
Two-step log-in stays on: an operator's reset hands over the password,
not the second factor.
"""

from __future__ import annotations

from aiohttp import web

from gateway.dashboard.session import log_out, visitor_of
from gateway.dashboard.session_tracking import security_of
from gateway.dashboard.views import render, sentence
from gateway.store.accounts import StoreError
from gateway.store.security import MAX_PASSWORD, MIN_PASSWORD

RESET_PATH = "/dashboard/reset"  # also where `gateway accounts reset-password` links point


async def reset_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    account = await security_of(request).reset_account(token)
    if account is None:
        return _dead_link(request)
    return render(request, "reset.html", _context(token, account.email))


async def reset_password(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = _str(form.get("token"))
    password = _str(form.get("new_password"))
    sec = security_of(request)
    account = await sec.reset_account(token)
    if account is None:
        return _dead_link(request)
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        # Checked before the token is spent: a typo does not cost the link.
        error = f"The new password must have {MIN_PASSWORD} to {MAX_PASSWORD} characters."
        return render(
            request, "reset.html", {**_context(token, account.email), "error": error}, status=400
        )
    try:
        done = await sec.use_reset_token(token, password)
    except StoreError as exc:
        error = sentence(str(exc))
        return render(
            request, "reset.html", {**_context(token, account.email), "error": error}, status=400
        )
    if done is None:
        return _dead_link(request)
    response = render(request, "reset.html", {"done": True, "email": done.email})
    if visitor_of(request).logged_in:
        await log_out(request, response)
    return response


def _context(token: str, email: str) -> dict[str, object]:
    return {"token": token, "email": email, "min_password": MIN_PASSWORD, "done": False}


def _dead_link(request: web.Request) -> web.Response:
    return render(request, "reset.html", {"dead": True}, status=404)


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""
