"""The Security page: password, sessions, two-step log-in, account deletion.

Each action is its own small form posting to its own path, so every one
works without JavaScript and carries the CSRF token. Every action that
could lock the owner out or erase data asks for the current password:
changing it, starting and confirming two-step log-in, turning it
off, new recovery codes, deletion (which also asks for the two-step code
when it is on). A stolen session cookie alone can therefore neither bind
an attacker's authenticator nor plant a secret the owner would scan, nor
take the recovery codes. Both two-step steps ask, because the pending
secret is shown on the page to whoever holds the session. Wrong passwords
typed here count towards a per-account ceiling, so a borrowed, logged-in
browser cannot be used to guess the password. After a change the browser is sent back to the page
(303) with a message from a fixed catalogue, so a reload repeats nothing.
The only exceptions are answers that show something once: the recovery
codes, and the farewell page after deletion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import segno
from aiohttp import web

from gateway.dashboard.session import log_out, store_of, visitor_of
from gateway.dashboard.session_tracking import security_of
from gateway.dashboard.views import config_of, login_required, redirect, render, sentence
from gateway.store.accounts import Account, StoreError
from gateway.store.security import MAX_PASSWORD, MIN_PASSWORD

PAGE = "/dashboard/security"
CONFIRM_WORD = "DELETE"
_CHECK_FAILS = 10  # wrong passwords/codes typed on this page per account and window
_CHECK_WINDOW_MS = 15 * 60_000

DONE: Mapping[str, str] = {
    "password": "Your password was changed. Every other session was logged out.",
    "sessions": "Every other session was logged out.",
    "session": "That session was logged out.",
    "two-step-off": "Two-step log-in is off. Log-ins ask for your password only.",
}
_WRONG_PASSWORD = "The current password is wrong."


@login_required
async def security_page(request: web.Request, account: Account) -> web.StreamResponse:
    return await _page(request, account)


@login_required
async def change_password(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    current = _field(form, "current_password")
    new = _field(form, "new_password")
    sec = security_of(request)
    if await _locked(request, account):
        return await _page(request, account, error=_LOCKED, status=429)
    if not await sec.check_password(account, current):
        return await _page(request, account, error=_WRONG_PASSWORD, status=400)
    try:
        await sec.set_password(account.id, new)
    except StoreError as exc:
        return await _page(request, account, error=sentence(str(exc)), status=400)
    await sec.end_sessions(account.id, keep_session_id=visitor_of(request).session_id or "")
    return redirect(PAGE + "?done=password")


@login_required
async def end_other_sessions(request: web.Request, account: Account) -> web.StreamResponse:
    await security_of(request).end_sessions(
        account.id, keep_session_id=visitor_of(request).session_id or ""
    )
    return redirect(PAGE + "?done=sessions")


@login_required
async def end_one_session(request: web.Request, account: Account) -> web.StreamResponse:
    """Log out one listed session; a ref the account does not have is a 404."""
    sec = security_of(request)
    ref = request.match_info["ref"]
    current = visitor_of(request).session_id or ""
    listed = {s.ref for s in await sec.sessions(account.id, current) if not s.current}
    if ref not in listed:
        raise web.HTTPNotFound()
    await sec.end_session_ref(account.id, ref)
    return redirect(PAGE + "?done=session")


@login_required
async def start_two_step(request: web.Request, account: Account) -> web.StreamResponse:
    refused = await _password_refused(request, account)
    if refused is not None:
        return refused
    sec = security_of(request)
    on, _ = await sec.totp_state(account.id)
    if not on:
        await sec.start_totp(account.id)
    return redirect(PAGE + "#two-step")


@login_required
async def confirm_two_step(request: web.Request, account: Account) -> web.StreamResponse:
    refused = await _password_refused(request, account)
    if refused is not None:
        return refused
    form = await request.post()
    sec = security_of(request)
    code = _field(form, "code").replace(" ", "")
    codes = await sec.confirm_totp(account.id, code, config_of(request).dashboard.recovery_codes)
    if codes is None:
        return await _page(
            request,
            account,
            error="That code did not match. Check the time on your phone and try the newest code.",
            status=400,
        )
    return await _page(request, account, recovery_codes=codes)


@login_required
async def new_recovery_codes(request: web.Request, account: Account) -> web.StreamResponse:
    """Replace every unused recovery code; the new ones are shown once."""
    refused = await _password_refused(request, account)
    if refused is not None:
        return refused
    count = config_of(request).dashboard.recovery_codes
    codes = await security_of(request).new_recovery_codes(account.id, count)
    if codes is None:
        return await _page(request, account, error="Two-step log-in is off.", status=400)
    return await _page(request, account, recovery_codes=codes)


@login_required
async def turn_off_two_step(request: web.Request, account: Account) -> web.StreamResponse:
    refused = await _password_refused(request, account)
    if refused is not None:
        return refused
    await security_of(request).disable_totp(account.id)
    return redirect(PAGE + "?done=two-step-off")


@login_required
async def delete_account(request: web.Request, account: Account) -> web.StreamResponse:
    form = await request.post()
    sec = security_of(request)
    if await _locked(request, account):
        return await _page(request, account, error=_LOCKED, status=429)
    if _field(form, "confirm").strip() != CONFIRM_WORD:
        return await _page(
            request, account, error=f"Type {CONFIRM_WORD} to confirm the deletion.", status=400
        )
    if not await sec.check_password(account, _field(form, "current_password")):
        return await _page(request, account, error=_WRONG_PASSWORD, status=400)
    on, _ = await sec.totp_state(account.id)
    if on and not await sec.check_second_factor(account.id, _field(form, "code")):
        return await _page(request, account, error="The two-step code is wrong.", status=400)
    revoked = await sec.delete_account(account)
    response = render(request, "account_deleted.html", {"revoked": revoked})
    await log_out(request, response)
    return response


async def _page(
    request: web.Request,
    account: Account,
    *,
    error: str | None = None,
    recovery_codes: list[str] | None = None,
    status: int = 200,
) -> web.Response:
    sec = security_of(request)
    visitor = visitor_of(request)
    on, pending = await sec.totp_state(account.id)
    context: dict[str, Any] = {
        "sessions": await sec.sessions(account.id, visitor.session_id or ""),
        "two_step_on": on,
        "pending_secret": "" if on else pending,
        "qr_svg": "" if on or not pending else _qr(sec.provisioning_uri(pending, account.email)),
        "recovery_codes": recovery_codes,
        "codes_left": await sec.recovery_codes_left(account.id) if on else 0,
        "error": error,
        "min_password": MIN_PASSWORD,
        "max_password": MAX_PASSWORD,
        "confirm_word": CONFIRM_WORD,
    }
    done = DONE.get(request.query.get("done", ""))
    if done and error is None and recovery_codes is None:
        context["message"] = done
    return render(request, "security.html", context, account=account, status=status)


def _qr(uri: str) -> str:
    """The otpauth URI as an inline SVG (no script, no external image, CSP-safe)."""
    qr = segno.make(uri, error="m")
    svg: str = qr.svg_inline(
        scale=4, dark="#000", light="#fff", title="QR code for your authenticator app"
    )
    return svg


_LOCKED = "Too many wrong passwords or codes. Try again in 15 minutes."


def _counter(account: Account) -> str:
    return f"security:{account.id}"


async def _password_refused(request: web.Request, account: Account) -> web.Response | None:
    """The page with an error unless the form's "Current password" is right (counted first)."""
    if await _locked(request, account):
        return await _page(request, account, error=_LOCKED, status=429)
    form = await request.post()
    if not await security_of(request).check_password(account, _field(form, "current_password")):
        return await _page(request, account, error=_WRONG_PASSWORD, status=400)
    return None


async def _locked(request: web.Request, account: Account) -> bool:
    """Count this attempt BEFORE its password or code is checked (one atomic call).

    Counting first means parallel guesses cannot all be checked before the
    first is counted (the log-in throttle works the same way); every
    attempt counts, right or wrong, so the limit is attempts per window.
    """
    count, _ = await store_of(request).count_failure(_counter(account), _CHECK_WINDOW_MS)
    return count > _CHECK_FAILS


def _field(form: Mapping[str, Any], name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""
