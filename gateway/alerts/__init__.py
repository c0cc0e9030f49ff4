"""Usage alerts for key holders: rules on their keys' counters, signed webhook deliveries.

A plug-in (``plug_alerts``): each process runs the evaluator (rules fired at
most once per window, decided in Redis) and the deliverer (the Redis queue,
retried with backoff); ``gateway.alerts.api`` is what the dashboard and the
admin API call. Nothing here runs on a call's path.

May import: config, redis.keyspace, store, typedefs, plugin, admin (its endpoints join the
admin API through ``add_admin_routes``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from gateway import typedefs as T
from gateway.admin import add_admin_routes
from gateway.alerts.adminroutes import add_alert_routes
from gateway.alerts.delivery import Deliverer
from gateway.alerts.evaluator import Evaluator
from gateway.plugin import Parts, running


def plug_alerts(app: web.Application, parts: Parts) -> None:
    """Run the evaluator and the deliverer in this process when ``alerts.enabled``;
    the webhooks and rules of every account through the admin API either way."""
    add_admin_routes(app, add_alert_routes)
    if parts.cfg.alerts.enabled:
        app.cleanup_ctx.append(_alerts_ctx)


async def _alerts_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[T.CONFIG]
    redis = app[T.STORE].redis  # the Store's client: seconds, not the hot path's ms
    deliverer = Deliverer(redis, cfg.redis.prefix, cfg.alerts)
    evaluator = Evaluator(redis, cfg, fired=deliverer.wake)
    async with (
        running(deliverer.run(), "alerts-deliver"),
        running(evaluator.run(), "alerts-evaluate"),
    ):
        yield


__all__ = ["plug_alerts"]
