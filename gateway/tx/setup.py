"""``tx_ctx(handlers)``: the transaction methods' resources for the app's life.

One cleanup context (app.py), run after the pipelines are built (``_rpc_ctx``): the HTTP
session to the private endpoints, the bucket script, the key-mode cache
(dropped on key events), the transaction log's flush task and the
``gateway_transactions_total`` counter; then each network's handlers are
registered as local methods of its pipeline. On the way out, sends still
in flight finish (each has its own timeout) before the session closes, and
the log is flushed once more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway import typedefs as T
from gateway.limits.limiter import MuxScript, RedisScript, ScriptRunner
from gateway.ops.metrics import METRICS
from gateway.rpc.pipeline import Pipeline
from gateway.tx.bucket import BUCKET_LUA, Buckets
from gateway.tx.keymode import KeyModes
from gateway.tx.methods import TxMethods
from gateway.tx.routes import FanOut
from gateway.tx.senders import TxLimits
from gateway.tx.targets import PublicNodes, private_targets
from gateway.tx.txlog import TxLog


def tx_counter(registry: CollectorRegistry) -> Counter:
    """``gateway_transactions_total{network,method,route,outcome}`` on the app's registry."""
    return Counter(
        "gateway_transactions_total",
        "Raw transactions and bundles by route (public, private, 'private, then public', "
        "'-' when refused before routing) and outcome (accepted, rejected by the nodes, "
        "failed: no answer, invalid: refused by the gateway's decoder, limited / "
        "sender_limited: over the bundle or sender rate)",
        ["network", "method", "route", "outcome"],
        registry=registry,
    )


def _runner(app: web.Application) -> ScriptRunner:
    cfg = app[T.CONFIG].redis
    mux = app[T.MUX]
    if mux is not None:
        return MuxScript(mux, BUCKET_LUA)
    return RedisScript(app[T.REDIS], BUCKET_LUA, cfg.failure_log_interval_s, app[T.REDIS_URL])


class _Handler(Protocol):
    pipeline: Pipeline


def tx_ctx(handlers: Sequence[_Handler]) -> Callable[[web.Application], AsyncIterator[None]]:
    """The cleanup context of the transaction methods of ``handlers``' pipelines."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with _transactions(app, [h.pipeline for h in handlers]):
            yield

    return ctx


@contextlib.asynccontextmanager
async def _transactions(app: web.Application, pipelines: Sequence[Pipeline]) -> AsyncIterator[Any]:
    cfg = app[T.CONFIG]
    session = aiohttp.ClientSession()
    modes = KeyModes(app[T.REDIS], cfg.redis.prefix, cfg.admission.key_ttl_s)
    app[T.KEY_EVENTS].add(modes.invalidate)
    buckets = Buckets(_runner(app), cluster=cfg.redis.cluster)
    txlog = TxLog(app[T.STORE].redis, cfg.redis.prefix, cfg.insight.log_cap, cfg.insight.log_ttl_s)
    counter = tx_counter(app[METRICS].registry)
    fan = FanOut()
    for pipe in pipelines:
        net = pipe.network
        private = private_targets(session, net.builders, net.tx_timeout_s)
        public = PublicNodes(pipe.pool, net)
        limits = TxLimits(buckets, net, cfg.redis.prefix, cfg.redis.fail_open)
        methods = TxMethods(pipe, private, public, modes, limits, txlog, counter, fan)
        methods.register(pipe.local, net.methods)
    flusher = asyncio.create_task(txlog.run(), name="tx-log-flush")
    try:
        yield
    finally:
        await fan.close()
        flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher
        app[T.KEY_EVENTS].remove(modes.invalidate)
        await session.close()
