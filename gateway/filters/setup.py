"""``plug_filters``: the filter methods join each network's pipeline (a ``gateway.plugin``).

One cleanup context, run once the pipelines exist: the filter store on the
app's Redis client, the ``gateway_filters_live`` gauge on the app's
registry, and each network's filter methods (``methods.add_filter_methods``)
on its pipeline. Filter state lives in Redis, so there is nothing to close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from gateway import typedefs as T
from gateway.filters.live import live_gauge
from gateway.filters.methods import add_filter_methods
from gateway.filters.store import FilterStore
from gateway.plugin import PIPELINES, Parts
from gateway.telemetry.metrics import METRICS


def plug_filters(app: web.Application, parts: Parts) -> None:
    """Add the cleanup context that gives every pipeline its filter methods."""
    app.cleanup_ctx.append(_filters_ctx)


async def _filters_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[T.CONFIG]
    store = FilterStore.for_config(app[T.REDIS], cfg.redis.prefix, cfg.filters)
    live = live_gauge(app[METRICS].registry)
    for name, pipeline in app[PIPELINES].items():
        add_filter_methods(pipeline, store, app[T.ERRORS], live.labels(name))
    yield
