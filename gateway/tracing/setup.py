"""``plug_tracing``: with ``tracing.otlp_endpoint`` set, one cleanup context that builds
the app's ``Tracer`` (provider, batch processor, OTLP/HTTP exporter), has every
network's pipeline trace its calls, and on exit stops them and sends the last
spans (the provider's shutdown flushes). Off (the default), nothing is added and
no tracer, span processor or exporter is ever imported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from importlib import metadata

from aiohttp import web

from gateway import typedefs as T
from gateway.plugin import PIPELINES, Parts

log = logging.getLogger("gateway.tracing")


def plug_tracing(app: web.Application, parts: Parts) -> None:
    """Trace every call when ``tracing.otlp_endpoint`` is set (a ``gateway.plugin``)."""
    if parts.cfg.tracing.otlp_endpoint:
        app.cleanup_ctx.append(_tracing_ctx)


async def _tracing_ctx(app: web.Application) -> AsyncIterator[None]:
    from gateway.telemetry.tracer import Tracer  # only now: off, it is never loaded

    cfg = app[T.CONFIG].tracing
    tracer = Tracer(cfg, _version())
    pipelines = list(app[PIPELINES].values())
    for pipeline in pipelines:
        pipeline.trace_with(tracer)
    # never the endpoint: it may hold a token
    log.info("tracing on service=%s sample_ratio=%s", cfg.service_name, cfg.sample_ratio)
    try:
        yield
    finally:
        for pipeline in pipelines:
            pipeline.trace_with(None)
        await asyncio.to_thread(tracer.shutdown)


def _version() -> str:
    try:
        return metadata.version("rpc-gateway")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"
