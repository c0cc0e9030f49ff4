"""``plug_transactions``: the transaction methods' resources for the app's life.

A plug-in (``gateway.plugin``): one cleanup context, run after the pipelines
are built (``app[PIPELINES]``): the HTTP
session to the private endpoints, the bucket script, the key-mode cache
(dropped on key events), the transaction log's flush task and the
``gateway_transactions_total`` counter; then each network's handlers are
registered as local methods of its pipeline, and on a network with private
endpoints a ``Tracker`` follows its private transactions until they land
(``gateway_private_tx_total``, ``gateway_private_tx_inclusion_seconds``).
On the way out, sends still in flight finish (each has its own timeout)
before the session closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway import typedefs as T
from gateway.limits.limiter import MuxScript, RedisScript, ScriptRunner
from gateway.plugin import PIPELINES, Parts
from gateway.rpc.pipeline import Pipeline
from gateway.telemetry.metrics import METRICS
from gateway.tx.bucket import BUCKET_LUA, Buckets
from gateway.tx.builderstatus import StatusAsker
from gateway.tx.keymode import KeyModes
from gateway.tx.methods import TxMethods
from gateway.tx.routes import FanOut
from gateway.tx.senders import TxLimits
from gateway.tx.targets import PublicNodes, private_targets
from gateway.tx.tracking import Tracker
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


def tracking_metrics(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    """``gateway_private_tx_total`` and ``gateway_private_tx_inclusion_seconds``."""
    outcomes = Counter(
        "gateway_private_tx_total",
        "Private transactions followed until they landed, by the endpoint that accepted "
        "them first (or whose status API said it included them) and outcome (included, "
        "replaced: the same sender and nonce went in with another, given_up: not in by "
        "maxBlockNumber or tx_track_blocks, dropped: the builders' status APIs said "
        "failed or dropped)",
        ["network", "builder", "outcome"],
        registry=registry,
    )
    inclusion = Histogram(
        "gateway_private_tx_inclusion_seconds",
        "Seconds from a private transaction's send to its receipt on the public nodes "
        "or a builder's status API saying included (as often as tx_track_interval_s looks)",
        ["network"],
        buckets=(0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60, 120, 300),
        registry=registry,
    )
    return outcomes, inclusion


def _runner(app: web.Application) -> ScriptRunner:
    cfg = app[T.CONFIG].redis
    mux = app[T.MUX]
    if mux is not None:
        return MuxScript(mux, BUCKET_LUA)
    return RedisScript(app[T.REDIS], BUCKET_LUA, cfg.failure_log_interval_s, app[T.REDIS_URL])


def plug_transactions(app: web.Application, parts: Parts) -> None:
    """Add the cleanup context of every pipeline's transaction methods (``gateway.plugin``)."""
    app.cleanup_ctx.append(_tx_ctx)


async def _tx_ctx(app: web.Application) -> AsyncIterator[None]:
    async with _transactions(app, list(app[PIPELINES].values())):
        yield


@contextlib.asynccontextmanager
async def _transactions(app: web.Application, pipelines: Sequence[Pipeline]) -> AsyncIterator[Any]:
    cfg = app[T.CONFIG]
    session = aiohttp.ClientSession()
    modes = KeyModes(app[T.REDIS], cfg.redis.prefix, cfg.admission.key_ttl_s)
    app[T.KEY_EVENTS].add(modes.invalidate)
    buckets = Buckets(_runner(app), cluster=cfg.redis.cluster)
    txlog = TxLog(app[T.STORE].redis, cfg.redis.prefix, cfg.insight.log_cap, cfg.insight.log_ttl_s)
    registry = app[METRICS].registry
    counter = tx_counter(registry)
    outcomes, inclusion = tracking_metrics(registry)
    fan = FanOut()
    tasks = [asyncio.create_task(txlog.run(), name="tx-log-flush")]
    for pipe in pipelines:
        net = pipe.network
        private = private_targets(session, net.builders, net.tx_timeout_s)
        public = PublicNodes(pipe.pool, net)
        limits = TxLimits(buckets, net, cfg.redis.prefix, cfg.redis.fail_open)
        tracker = None
        if private:
            redis = app[T.STORE].redis
            status = StatusAsker(session, net.builders, net.tx_timeout_s)
            tracker = Tracker(
                redis, cfg.redis.prefix, net, pipe.pool, txlog, outcomes, inclusion, status
            )
            tasks.append(asyncio.create_task(tracker.run(), name=f"tx-track-{net.name}"))
        parts = (private, public, modes, limits, txlog, counter, fan, tracker)
        methods = TxMethods(pipe, *parts)
        methods.register(pipe.local, net.methods)
    try:
        yield
    finally:
        await fan.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        app[T.KEY_EVENTS].remove(modes.invalidate)
        await session.close()
