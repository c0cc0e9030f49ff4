"""``create_app(config)``: wires the parts; each resource has one cleanup_ctx.

Also the gunicorn entry point: ``gunicorn gateway.app:create_app
--worker-class aiohttp.GunicornUVLoopWebWorker`` calls ``create_app()``
with no argument, which loads the config from ``GATEWAY_CONFIG`` / env.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from gateway import typedefs as T
from gateway.accesslog import AccessLogger
from gateway.accounts import Store
from gateway.clientip import ClientIP
from gateway.config import Config, data_dir, load_config
from gateway.dashboard import setup_dashboard
from gateway.embedded import ensure_embedded
from gateway.handlers import RpcHandler
from gateway.limiter import MuxLimiter, RedisLimiter
from gateway.metrics import Metrics
from gateway.ops import setup_ops_routes
from gateway.redisconn import admin_connect, connect
from gateway.redismux import MuxRedis
from gateway.upstream import NodePool
from gateway.usage import ErrorCounter
from gateway.ws.setup import add_ws_route, setup_ws


def create_app(config: Config | None = None) -> web.Application:
    """The whole gateway as one aiohttp application."""
    cfg = config if config is not None else load_config()
    app = web.Application(
        client_max_size=cfg.limits.max_body_bytes, handler_args={"access_log_class": AccessLogger}
    )
    app[T.CONFIG] = cfg
    app[T.METRICS] = Metrics()
    app[T.CLIENT_IP] = ClientIP(cfg.server.trusted_proxies)
    app.cleanup_ctx.append(_redis_ctx)
    app.cleanup_ctx.append(_pools_ctx)
    app.cleanup_ctx.append(_errors_ctx)
    slots = asyncio.Semaphore(cfg.limits.max_in_flight)
    handlers = [RpcHandler(cfg, net, app[T.METRICS], slots) for net in cfg.networks]
    for handler in handlers:
        for path in (handler.network.prefix, handler.network.prefix + "/{key}"):
            if cfg.ws.enabled:  # GET + Upgrade opens a WebSocket (same resource as "*")
                add_ws_route(app, handler, path)
            app.router.add_route("*", path, handler.handle)
    app[T.HANDLERS] = handlers
    app.on_startup.append(_bind_handlers)
    setup_ws(app, handlers)
    setup_ops_routes(app)
    if cfg.dashboard.enabled:
        setup_dashboard(app, cfg)
    return app


async def _redis_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[T.CONFIG]
    url, embedded = cfg.redis.url, None
    if not url:
        url, embedded = await asyncio.to_thread(ensure_embedded, data_dir(cfg))
    redis = connect(cfg.redis, url)
    admin = admin_connect(cfg.redis, url)
    app[T.REDIS] = redis
    mux: MuxRedis | None = None
    if cfg.redis.cluster:
        app[T.LIMITER] = RedisLimiter(redis, cfg.plans, cfg.redis.prefix)
    else:
        mux = MuxRedis(
            url,
            timeout_s=cfg.redis.timeout_ms / 1000,
            connect_timeout_s=cfg.redis.connect_timeout_ms / 1000,
        )
        app[T.LIMITER] = MuxLimiter(mux, cfg.plans, cfg.redis.prefix)
    app[T.STORE] = Store(
        admin,
        prefix=cfg.redis.prefix,
        plans=[p.name for p in cfg.plans],
        default_plan=cfg.default_plan,
    )
    try:
        yield
    finally:
        if mux is not None:
            await mux.close()
        await redis.aclose()
        await admin.aclose()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _pools_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[T.CONFIG]
    metrics = app[T.METRICS]
    pools: dict[str, NodePool] = {}
    for net in cfg.networks:
        pool = NodePool(
            net,
            cfg.upstream,
            cfg.limits.upstream_connect_timeout_s,
            cfg.limits.upstream_timeout_s,
            metrics=metrics,
        )
        await pool.start()
        pools[net.name] = pool
    app[T.POOLS] = pools
    probes = [asyncio.create_task(p.probe_forever(), name=f"probe-{n}") for n, p in pools.items()]
    try:
        yield
    finally:
        for task in probes:
            task.cancel()
        for task in probes:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pool in pools.values():
            await pool.close()


async def _errors_ctx(app: web.Application) -> AsyncIterator[None]:
    counter = ErrorCounter(app[T.STORE])
    app[T.ERRORS] = counter
    task = asyncio.create_task(counter.run(), name="error-flush")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _bind_handlers(app: web.Application) -> None:
    """Give the handlers the limiter and pools, which exist once cleanup_ctx ran."""
    for handler in app[T.HANDLERS]:
        handler.bind(app[T.LIMITER], app[T.POOLS][handler.network.name], app[T.ERRORS])
