"""The alerts' admin endpoints, added to the admin API from this plug-in:

* ``GET|POST /admin/accounts/<email>/webhooks`` (POST ``{url}`` answers ``{id, url,
  secret, created_at}``, the secret shown this once; GET lists them with their
  delivery logs), ``DELETE /admin/accounts/<email>/webhooks/<id>``, and
  ``POST /admin/accounts/<email>/webhooks/<id>/test`` (a test delivery);
* ``GET|POST /admin/accounts/<email>/alerts`` (POST ``{rule, threshold,
  window_s?}``), ``DELETE /admin/accounts/<email>/alerts/<id>``.

The same functions as the dashboard's Alerts page (``gateway.alerts.api``), so
the same rules: https and public targets only (unless
``alerts.allow_private_targets``), the per-account caps, the rule names and
bounds. The audit entry names the account and the webhook or rule id, never a
URL's secret part or a signing secret.
"""

from __future__ import annotations

from aiohttp import web

from gateway import typedefs as T
from gateway.admin import admin_source, answer, audit, body_of
from gateway.alerts import api
from gateway.config import AlertsConfig
from gateway.store.accounts import Store, StoreError


def add_alert_routes(admin: web.Application) -> None:
    r = admin.router
    r.add_get("/accounts/{email}/webhooks", webhooks)
    r.add_post("/accounts/{email}/webhooks", create_webhook)
    r.add_delete("/accounts/{email}/webhooks/{id}", delete_webhook)
    r.add_post("/accounts/{email}/webhooks/{id}/test", send_test)
    r.add_get("/accounts/{email}/alerts", rules)
    r.add_post("/accounts/{email}/alerts", create_rule)
    r.add_delete("/accounts/{email}/alerts/{id}", delete_rule)


def _parts(request: web.Request) -> tuple[Store, AlertsConfig, str]:
    app = admin_source(request)
    return app[T.STORE], app[T.CONFIG].alerts, request.match_info["email"]


async def webhooks(request: web.Request) -> web.Response:
    store, cfg, account = _parts(request)
    return answer({"webhooks": await api.list_webhooks(store, cfg, account)})


async def create_webhook(request: web.Request) -> web.Response:
    store, cfg, account = _parts(request)
    body = await body_of(request)
    made = await api.create_webhook(store, cfg, account, body.get("url"))  # type: ignore[arg-type]
    audit(request, "webhook.create", account, webhook=made["id"])
    return answer(made, 201)


async def delete_webhook(request: web.Request) -> web.Response:
    store, _, account = _parts(request)
    webhook_id = request.match_info["id"]
    done = await api.delete_webhook(store, account, webhook_id)
    audit(request, "webhook.delete", account, webhook=webhook_id)
    return answer(done)


async def send_test(request: web.Request) -> web.Response:
    store, cfg, account = _parts(request)
    webhook_id = request.match_info["id"]
    queued = await api.send_test(store, cfg, account, webhook_id)
    audit(request, "webhook.test", account, webhook=webhook_id)
    return answer(queued, 202)


async def rules(request: web.Request) -> web.Response:
    store, _, account = _parts(request)
    return answer({"alerts": await api.list_rules(store, account)})


async def create_rule(request: web.Request) -> web.Response:
    store, cfg, account = _parts(request)
    body = await body_of(request)
    rule = body.get("rule")
    if not isinstance(rule, str):
        raise StoreError(
            "rule: one of quota_percent, rate_limited, key_expiring_days, error_percent"
        )
    made = await api.create_rule(
        store, cfg, account, rule, body.get("threshold"), body.get("window_s")
    )
    audit(request, "alert.create", account, alert=made["id"], rule=made["rule"])
    return answer(made, 201)


async def delete_rule(request: web.Request) -> web.Response:
    store, _, account = _parts(request)
    rule_id = request.match_info["id"]
    done = await api.delete_rule(store, account, rule_id)
    audit(request, "alert.delete", account, alert=rule_id)
    return answer(done)
