"""Operator endpoints: /healthz, /readyz, /metrics.

``/healthz`` answers while the event loop runs (a liveness probe).
``/readyz`` answers 200 only while Redis answers a PING on the hot path's own
connection (the multiplexed one the admission check uses, or the cluster
client) within its timeout, and every network has at least one node in
rotation; otherwise 503
with the problems listed, so a load balancer stops sending traffic.
``/metrics`` is the Prometheus text of this process, or of every worker in
multiprocess mode (see ``gateway.ops.metrics``); it is served on its own
listener (``gateway.ops.metricsport``), not among the public routes here.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway import typedefs as T

_NO_STORE = {"Cache-Control": "no-store"}


async def healthz(request: web.Request) -> web.Response:
    """The process is alive and its event loop answers."""
    return web.json_response({"status": "ok"}, headers=_NO_STORE)


async def readyz(request: web.Request) -> web.Response:
    """Redis answers and every network has at least one node in rotation."""
    app = request.app
    problems: list[str] = []
    mux = app.get(T.MUX)
    try:
        # The connection that admits requests, not a separate pool: a pool
        # parsing the URL differently once answered while every call failed.
        if mux is not None:
            await mux.ping()
        else:
            await app[T.REDIS].ping()
    except Exception as exc:  # any failure means "not ready", never a 500
        problems.append(f"redis: {type(exc).__name__}")
    networks: dict[str, dict[str, int]] = {}
    for name, pool in app[T.POOLS].items():
        networks[name] = summary = pool.summary()
        if summary["healthy"] == 0:
            problems.append(f"{name}: no healthy upstream node")
    status = 200 if not problems else 503
    return web.json_response(
        {"ready": not problems, "problems": problems, "networks": networks},
        status=status,
        headers=_NO_STORE,
    )


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text; routed only on the metrics listener (``server.metrics_listen``)."""
    body = request.app[T.METRICS].exposition()
    resp = web.Response(body=body, headers=_NO_STORE)
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    resp.charset = "utf-8"
    return resp


def setup_ops_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
