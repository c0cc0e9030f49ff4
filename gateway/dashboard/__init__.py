"""The account holders' dashboard, mounted at ``/dashboard``.

A sub-application, so its middlewares (security headers, session, CSRF)
run for dashboard paths only: RPC paths stay cookie-free and pay nothing
for them. Pages are server-rendered with Jinja2; the only script is the
copy button. All data goes through the shared ``Store``.

May import: store, rpc.clientip (the client's address), config, typedefs, plugin,
alerts (the Alerts page's functions).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web

from gateway.config import Config
from gateway.dashboard import (
    account_security,
    alerts,
    auth,
    endpoints,
    key_insight,
    key_tx,
    keys,
    login_code,
    password_reset,
    plan,
    session_tracking,
    usage,
)
from gateway.dashboard.csrf import csrf_middleware
from gateway.dashboard.security import security_middleware
from gateway.dashboard.session import session_middleware, visitor_of
from gateway.dashboard.views import fmt_number, fmt_time, iso_time, redirect
from gateway.plugin import Parts

PREFIX = "/dashboard"
_HERE = Path(__file__).parent


def plug_dashboard(app: web.Application, parts: Parts) -> None:
    """Mount the dashboard when ``dashboard.enabled`` (a ``gateway.plugin``)."""
    if parts.cfg.dashboard.enabled:
        setup_dashboard(app, parts.cfg)


def setup_dashboard(app: web.Application, cfg: Config) -> None:
    """Mount the dashboard on ``app`` (the gateway app made by ``create_app``)."""
    dash = web.Application(middlewares=[security_middleware, session_middleware, csrf_middleware])
    dash.middlewares.append(session_tracking.session_tracking_middleware)
    dash[session_tracking.SEEN] = session_tracking.SeenMemo()
    env = aiohttp_jinja2.setup(
        dash, loader=jinja2.FileSystemLoader(_HERE / "templates"), autoescape=True
    )
    env.filters["time"] = fmt_time
    env.filters["isotime"] = iso_time
    env.filters["number"] = fmt_number
    r = dash.router
    r.add_get("", home)
    r.add_get("/", home)
    r.add_get("/signup", auth.signup_page)
    r.add_post("/signup", auth.signup)
    r.add_get("/login", auth.login_page)
    r.add_post("/login", auth.login)
    r.add_post("/logout", auth.logout)
    r.add_get("/keys", keys.keys_page)
    r.add_post("/keys", keys.create_key)
    r.add_get("/keys/{key_id}/revoke", keys.confirm_revoke)
    r.add_post("/keys/{key_id}/revoke", keys.revoke_key)
    r.add_get("/keys/{key_id}/rotate", keys.confirm_rotate)
    r.add_post("/keys/{key_id}/rotate", keys.rotate_key)
    r.add_get("/usage", usage.usage_page)
    r.add_get("/usage/export", usage.usage_export)
    r.add_get("/plan", plan.plan_page)
    r.add_post("/plan", plan.switch_plan)
    r.add_get("/endpoints", endpoints.endpoints_page)
    _alerts_routes(r)
    _security_routes(r)
    r.add_get("/keys/{key_id}/limits", key_insight.limits_page)
    r.add_post("/keys/{key_id}/limits", key_insight.save_limits)
    r.add_get("/keys/{key_id}/requests", key_insight.requests_page)
    r.add_get("/keys/{key_id}/transactions", key_tx.tx_page)
    r.add_post("/keys/{key_id}/transactions", key_tx.save_tx)
    r.add_static("/static", _HERE / "static", name="static", append_version=True)
    app.add_subapp(PREFIX, dash)
    app.router.add_get("/", to_dashboard)


def _alerts_routes(r: web.UrlDispatcher) -> None:
    r.add_get("/alerts", alerts.alerts_page)
    r.add_post("/alerts/webhooks", alerts.add_webhook)
    r.add_post("/alerts/webhooks/{item_id}/test", alerts.test_webhook)
    r.add_post("/alerts/webhooks/{item_id}/delete", alerts.remove_webhook)
    r.add_post("/alerts/rules", alerts.add_rule)
    r.add_post("/alerts/rules/{item_id}/delete", alerts.remove_rule)


def _security_routes(r: web.UrlDispatcher) -> None:
    sec = account_security
    r.add_get("/security", sec.security_page)
    r.add_post("/security/password", sec.change_password)
    r.add_post("/security/sessions/end-others", sec.end_other_sessions)
    r.add_post("/security/sessions/{ref}/end", sec.end_one_session)
    r.add_post("/security/two-step/start", sec.start_two_step)
    r.add_post("/security/two-step/confirm", sec.confirm_two_step)
    r.add_post("/security/two-step/off", sec.turn_off_two_step)
    r.add_post("/security/two-step/recovery-codes", sec.new_recovery_codes)
    r.add_post("/security/delete", sec.delete_account)
    r.add_get("/login/code", login_code.code_page)
    r.add_post("/login/code", login_code.submit_code)
    r.add_get("/reset", password_reset.reset_page)
    r.add_post("/reset", password_reset.reset_password)


async def home(request: web.Request) -> web.StreamResponse:
    return redirect(PREFIX + ("/keys" if visitor_of(request).logged_in else "/login"))


async def to_dashboard(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(PREFIX + "/")


__all__ = ["plug_dashboard", "setup_dashboard"]
