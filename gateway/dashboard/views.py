"""What every dashboard page shares: rendering, the login guard, messages.

Views are plain functions ``(request) -> Response`` split by page group
(auth, keys, usage, plan, endpoints); this module keeps the glue they all
need in one place so none of them touches cookies or CSRF directly.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web

from gateway import typedefs as T
from gateway.config import Config
from gateway.dashboard.session import VISITOR, log_out, store_of, visitor_of
from gateway.store.accounts import Account, KeyRecord, NotFound

AccountView = Callable[[web.Request, Account], Awaitable[web.StreamResponse]]
View = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Confirmations after a redirect come from this fixed catalogue (``?msg=``),
# so nothing a URL says is ever echoed into a page.
MESSAGES: Mapping[str, str] = {
    "welcome": "Your account is ready. Create your first API key below.",
    "logged-out": "You have been logged out.",
    "revoked": "The key was revoked. Requests with it are refused from now on.",
    "plan": "Your plan was changed. All your keys use it from their next request.",
    "same-plan": "You are already on that plan.",
    "webhook-removed": "The webhook was removed. Nothing more is delivered to it.",
    "test-queued": "A test delivery was queued; its row appears in the delivery log below.",
    "rule-added": "The rule was added. It applies to every key of your account.",
    "rule-removed": "The rule was removed.",
}


def config_of(request: web.Request) -> Config:
    return request.config_dict[T.CONFIG]


def redirect(location: str) -> web.Response:
    """303 See Other: after a POST the browser GETs the next page."""
    return web.Response(status=303, headers={"Location": location})


def render(
    request: web.Request,
    template: str,
    context: Mapping[str, Any] | None = None,
    *,
    account: Account | None = None,
    status: int = 200,
) -> web.Response:
    """Render a page with what the layout needs (account, CSRF token, message)."""
    visitor = request.get(VISITOR)
    msg = request.query.get("msg", "")
    ctx: dict[str, Any] = {
        "account": account,
        "csrf_token": visitor.csrf if visitor is not None else "",
        "message": MESSAGES.get(msg),
        "path": request.path,
        "static": _static_url(request),
    }
    ctx.update(context or {})
    return aiohttp_jinja2.render_template(template, request, ctx, status=status)


def login_required(view: AccountView) -> View:
    """Run ``view`` with the logged-in account; otherwise go to the log-in page."""

    @functools.wraps(view)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        visitor = visitor_of(request)
        if visitor.account_id is None:
            return redirect("/dashboard/login?next=" + quote(request.path_qs, safe="/"))
        try:
            account = await store_of(request).account(visitor.account_id)
        except NotFound:  # account removed by an operator: the session dies with it
            response = redirect("/dashboard/login")
            await log_out(request, response)
            return response
        return await view(request, account)

    return wrapper


async def own_key(request: web.Request, account: Account) -> KeyRecord:
    """The key named in the path (``key_id``) if ``account`` owns it, else 404."""
    try:
        return await store_of(request).get_key(request.match_info["key_id"], account.id)
    except NotFound:
        raise web.HTTPNotFound() from None


def safe_next(target: str) -> str:
    """The ``next`` target if it is a same-site dashboard path, else the keys page.

    Only visible ASCII is accepted: a CR/LF would split the Location header
    (aiohttp refuses to send it and drops the connection), and ``//host``,
    ``/\\host`` or a scheme would leave the site. Targets we make ourselves
    are percent-encoded (``login_required``), so nothing legitimate is lost.
    """
    if (
        len(target) <= 2048
        and target.startswith("/dashboard/")
        and target.isascii()
        and target.isprintable()
        and " " not in target
        and "\\" not in target
    ):
        return target
    return "/dashboard/keys"


def sentence(text: str) -> str:
    """Store messages are lower-case clauses; pages show sentences."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def fmt_time(ms: int | None, empty: str = "Never") -> str:
    if ms is None:
        return empty
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def iso_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def fmt_number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _static_url(request: web.Request) -> Callable[[str], str]:
    def url(filename: str) -> str:
        resource = request.app.router["static"]
        return str(resource.url_for(filename=filename))

    return url
