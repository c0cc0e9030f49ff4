"""``create_app(config)``: wires the parts; each resource has one cleanup_ctx.

Also a gunicorn entry point: ``gunicorn 'gateway.app:create_app()'
--worker-class aiohttp.GunicornUVLoopWebWorker`` (with the parentheses:
aiohttp's worker takes an app or an *async* factory) calls ``create_app()``
with no argument, which loads the config from ``GATEWAY_CONFIG`` / env.
Such an app is served by gunicorn's own runner, so it opens its ``/metrics``
listener itself (one cleanup_ctx); ``gateway.server:gunicorn_app`` and
``gateway serve`` use ``GatewayRunner``, which does that (and more).

It stays whole because it is the one wiring diagram: every part, in start order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from gateway import typedefs as T
from gateway.admin import plug_admin
from gateway.alerts import plug_alerts
from gateway.config import Config, data_dir, load_config
from gateway.dashboard import plug_dashboard
from gateway.filters.setup import plug_filters
from gateway.limits.leasing import LeaseLimiter, LeaseSettings
from gateway.limits.limiter import (
    ADMIT_LUA,
    LEASE_LUA,
    ExactLimiter,
    MuxScript,
    RedisScript,
    ScriptRunner,
)
from gateway.ops.accesslog import AccessLogger
from gateway.ops.logsetup import setup_logging, use_format
from gateway.ops.metricsport import metrics_listener_ctx
from gateway.ops.routes import setup_ops_routes
from gateway.plugin import PIPELINES, Parts, Plugin, running
from gateway.redis.clients import admin_connect, connect, pubsub_connect
from gateway.redis.embedded import ensure_embedded
from gateway.redis.mux import MuxRedis
from gateway.rpc.clientip import CLIENT_IP, ClientIP
from gateway.rpc.http import RpcHttp, expect_later
from gateway.rpc.localmethods import LocalMethods
from gateway.rpc.pipeline import Pipeline
from gateway.rpc.waiting import AdmissionWaits
from gateway.store.accounts import Store
from gateway.store.errorcounts import ErrorCounter
from gateway.store.insight import InsightSink
from gateway.store.keyevents import KeyEvents
from gateway.store.usagesink import UsageSink
from gateway.telemetry.metrics import METRICS, Metrics
from gateway.tracing.setup import plug_tracing
from gateway.tx.setup import plug_transactions
from gateway.upstream.pool import NodePool
from gateway.ws.service import WS
from gateway.ws.setup import plug_ws
from gateway.ws.upgrade import WsRoute, is_upgrade

# Only this module and the lean door read the handlers, so their key lives here:
# in typedefs it made a (type-only) cycle typedefs -> rpc -> typedefs.
HANDLERS: web.AppKey[list[RpcHttp]] = web.AppKey("handlers")

# The optional parts, in the order they plug in (gateway.plugin says how).
# The admin API comes first: a later plug-in may add admin routes (add_admin_routes).
PLUGINS: tuple[Plugin, ...] = (
    plug_admin,
    plug_ws,
    plug_filters,
    plug_transactions,
    plug_dashboard,
    plug_tracing,
    plug_alerts,
)


def create_app(config: Config | None = None) -> web.Application:
    """The whole gateway as one aiohttp application."""
    hosted = config is None  # gunicorn's runner, not ours (see the module docstring)
    cfg = config if config is not None else load_config()
    use_format(cfg.log.format)  # log.format, on the handler setup_logging installed
    app = web.Application(
        client_max_size=cfg.limits.max_body_bytes, handler_args={"access_log_class": AccessLogger}
    )
    app[T.CONFIG] = cfg
    app[METRICS] = Metrics()
    app[CLIENT_IP] = ClientIP(cfg.server.trusted_proxies)
    app.cleanup_ctx.append(_redis_url_ctx)
    app.cleanup_ctx.append(_redis_ctx)
    app.cleanup_ctx.append(_mux_ctx)
    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(_key_events_ctx)
    app.cleanup_ctx.append(_usage_ctx)
    app.cleanup_ctx.append(_admission_ctx)
    app.cleanup_ctx.append(_pools_ctx)
    app.cleanup_ctx.append(_errors_ctx)
    app.cleanup_ctx.append(_insight_ctx)
    if hosted:
        setup_logging(cfg.log.format)  # gunicorn configures only its own loggers
        app.cleanup_ctx.append(metrics_listener_ctx)
    # The router is frozen before any cleanup context runs, so each network's
    # routes exist from here and call the adapters _rpc_ctx makes whole
    # (a pipeline, and its HTTP and WebSocket adapters as peers).
    local = {net.name: LocalMethods() for net in cfg.networks}
    routes = {net.name: _Routes() for net in cfg.networks}
    for net in cfg.networks:
        route = routes[net.name]
        for path in (net.prefix, net.prefix + "/{key}"):
            if cfg.ws.enabled:  # GET + Upgrade opens a WebSocket (same resource as "*")
                app.router.add_get(path, route.get, allow_head=False)
            app.router.add_route("*", path, route.handle, expect_handler=expect_later)
        # any other path under the prefix is a malformed key: 401 JSON-RPC, not a text 404
        tail = net.prefix + "/{tail:.*}"
        app.router.add_route("*", tail, route.handle, expect_handler=expect_later)
    app[HANDLERS] = []  # filled by _rpc_ctx, in the order of cfg.networks
    app.cleanup_ctx.append(_rpc_ctx(routes, local))
    parts = Parts(cfg, local)
    for plug in PLUGINS:  # their cleanup contexts run after _rpc_ctx: on its pipelines
        plug(app, parts)
    setup_ops_routes(app)  # last: its catch-all answers a JSON 404 for what is left
    return app


async def _redis_url_ctx(app: web.Application) -> AsyncIterator[None]:
    """Where Redis is: the configured URL, or the embedded server (started here)."""
    cfg = app[T.CONFIG]
    url, embedded = cfg.redis.url, None
    if not url:
        url, embedded = await asyncio.to_thread(ensure_embedded, data_dir(cfg))
    app[T.REDIS_URL] = url
    try:
        yield
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _redis_ctx(app: web.Application) -> AsyncIterator[None]:
    """The hot-path redis-py client (millisecond timeouts; the Cluster client)."""
    redis = connect(app[T.CONFIG].redis, app[T.REDIS_URL])
    app[T.REDIS] = redis
    try:
        yield
    finally:
        await redis.aclose()


async def _mux_ctx(app: web.Application) -> AsyncIterator[None]:
    """The multiplexed admission connection (one Redis; on a Cluster the client above)."""
    cfg = app[T.CONFIG].redis
    mux: MuxRedis | None = None
    if not cfg.cluster:
        mux = MuxRedis(
            app[T.REDIS_URL],
            timeout_s=cfg.timeout_ms / 1000,
            connect_timeout_s=cfg.connect_timeout_ms / 1000,
            log_interval_s=cfg.failure_log_interval_s,
        )
    app[T.MUX] = mux
    try:
        yield
    finally:
        if mux is not None:
            await mux.close()


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    """Accounts, keys and sessions over their own client (seconds, not milliseconds)."""
    cfg = app[T.CONFIG]
    admin = admin_connect(cfg.redis, app[T.REDIS_URL])
    app[T.STORE] = Store.from_config(admin, cfg)
    try:
        yield
    finally:
        await admin.aclose()


async def _key_events_ctx(app: web.Application) -> AsyncIterator[None]:
    """The pub/sub listener that tells this process which key records changed."""
    cfg = app[T.CONFIG]
    url = app[T.REDIS_URL]
    events = KeyEvents(
        lambda: pubsub_connect(url), cfg.redis.prefix, cfg.redis.failure_log_interval_s
    )
    app[T.KEY_EVENTS] = events
    async with running(events.run(), "key-events"):
        yield


async def _usage_ctx(app: web.Application) -> AsyncIterator[None]:
    """Usage counters summed in this process, flushed each interval and on exit."""
    cfg = app[T.CONFIG]
    sink = UsageSink(
        app[T.STORE].redis,
        cfg.redis.prefix,
        interval_s=cfg.admission.usage_flush_s,
        address=app[T.REDIS_URL],
        log_interval_s=cfg.redis.failure_log_interval_s,
    )
    app[T.USAGE] = sink
    async with running(sink.run(), "usage-flush"):
        yield


async def _admission_ctx(app: web.Application) -> AsyncIterator[None]:
    """The limiter: leased (default) or one exact script call per request."""
    cfg = app[T.CONFIG]
    mux = app[T.MUX]

    def runner(lua: str) -> ScriptRunner:
        if mux is not None:
            return MuxScript(mux, lua)
        return RedisScript(app[T.REDIS], lua, cfg.redis.failure_log_interval_s, app[T.REDIS_URL])

    if cfg.admission.mode == "exact":
        app[T.LIMITER] = ExactLimiter(runner(ADMIT_LUA), cfg.plans, cfg.redis.prefix)
        yield
        return
    a = cfg.admission
    limiter = LeaseLimiter(
        runner(LEASE_LUA),
        cfg.plans,
        cfg.redis.prefix,
        app[T.USAGE],
        LeaseSettings(a.key_ttl_s, a.lease_horizon_s, a.max_slice, a.lease_idle_s),
    )
    app[T.KEY_EVENTS].add(limiter.invalidate)
    app[T.LIMITER] = limiter
    async with running(limiter.run(), "lease-give-back"):
        yield


async def _pools_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[T.CONFIG]
    metrics = app[METRICS]
    pools: dict[str, NodePool] = {}
    for net in cfg.networks:
        pool = NodePool(
            net,
            cfg.upstream,
            cfg.limits.upstream_connect_timeout_s,
            cfg.limits.upstream_timeout_s,
            metrics=metrics,
            max_response_bytes=cfg.limits.max_response_bytes,
            config=cfg,
            redis=app[T.REDIS] if cfg.cache.redis else None,
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
    async with running(counter.run(), "error-flush"):
        yield


async def _insight_ctx(app: web.Application) -> AsyncIterator[None]:
    """Request insight per key, flushed by this worker once per interval (and on exit)."""
    cfg = app[T.CONFIG].insight
    if not cfg.enabled:
        yield
        return
    sink = InsightSink(
        app[T.STORE].redis,
        app[T.CONFIG].redis.prefix,
        interval_s=cfg.interval_s,
        log_cap=cfg.log_cap,
        log_ttl_s=cfg.log_ttl_s,
        max_keys=cfg.max_keys,
    )
    app[T.INSIGHT] = sink
    async with running(sink.run(), "insight-flush"):
        yield


class _Routes:
    """One network's handlers in the router, calling the adapters ``_rpc_ctx`` makes.

    A GET that asks to upgrade goes to the WebSocket adapter, any other
    request to HTTP (a GET: 405, or 401 with no key). Before the app has
    started there is no adapter yet, and a request fails loudly.
    """

    __slots__ = ("http", "ws")

    def __init__(self) -> None:
        self.http: RpcHttp | None = None
        self.ws: WsRoute | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        http = self.http
        if http is None:
            raise RuntimeError("RPC request before the app started")
        return await http.handle(request)

    async def get(self, request: web.Request) -> web.StreamResponse:
        ws = self.ws
        if ws is not None and is_upgrade(request):
            return await ws.handle(request)
        return await self.handle(request)


def _rpc_ctx(
    routes: dict[str, _Routes], local: dict[str, LocalMethods]
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The cleanup context that builds each network's pipeline and its adapters, whole.

    It runs last among the core resources: every one a pipeline uses exists.
    The pipelines share one in-flight semaphore; each reads its network's
    local methods, which plug-ins add (``gateway.plugin``). The pipelines,
    by network, are ``app[PIPELINES]`` for the plug-ins' cleanup contexts.
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        cfg = app[T.CONFIG]
        insight = app.get(T.INSIGHT)
        client_ip = app[CLIENT_IP]
        svc = app.get(WS)
        slots = asyncio.Semaphore(cfg.limits.max_in_flight)
        waits = AdmissionWaits(cfg, app[METRICS].admission_wait)
        handlers = app[HANDLERS]
        pipelines: dict[str, Pipeline] = {}
        for net in cfg.networks:
            pipeline = Pipeline(
                cfg,
                net,
                app[METRICS],
                app[T.LIMITER],
                app[T.POOLS][net.name],
                app[T.ERRORS],
                slots=slots,
                local=local[net.name],
                insight=insight,
                waits=waits,
            )
            pipelines[net.name] = pipeline
            route = routes[net.name]
            route.http = RpcHttp(pipeline, client_ip)
            route.ws = WsRoute(pipeline, svc, client_ip) if svc is not None else None
            handlers.append(route.http)
        app[PIPELINES] = pipelines
        yield

    return ctx
