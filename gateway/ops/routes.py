"""Operator endpoints: /healthz, /readyz, /readyz/<network>, /metrics.

``/healthz`` answers while the event loop runs (a liveness probe).

``/readyz`` always reports Redis (a PING on the hot path's own connection:
the multiplexed one the admission check uses, or the cluster client) and
each network (every node: redacted URL, in service or why not, chain id,
head) in its JSON body. Which failures make it 503 is
``server.ready_requires`` (default ``["redis", "any_network"]``): one opBNB
provider outage then keeps a pod serving BSC, instead of taking every pod
out of the Service (docs/DEPLOYING.md "Readiness").

``/readyz/<network>`` is one network alone: 200 while it has a node in
service (and Redis answers, when ``ready_requires`` names ``redis``), for a
per-network Service or an external load balancer; 404 for a network that is
not configured.

``/metrics`` is the Prometheus text of this process, or of every worker in
multiprocess mode (see ``gateway.ops.metrics``); it is served on its own
listener (``gateway.ops.metricsport``), not among the public routes here.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway import typedefs as T
from gateway.config.redact import redact_url
from gateway.ops.metrics import METRICS
from gateway.redis.failurelog import error_fields

_NO_STORE = {"Cache-Control": "no-store"}


async def healthz(request: web.Request) -> web.Response:
    """The process is alive and its event loop answers."""
    return web.json_response({"status": "ok"}, headers=_NO_STORE)


async def _redis_state(app: web.Application) -> dict[str, Any]:
    """Redis as /readyz shows it: its (redacted) address, and the error if the PING failed."""
    url = app.get(T.REDIS_URL, "")
    state: dict[str, Any] = {"ready": True, "address": redact_url(url) if url else None}
    mux = app.get(T.MUX)
    try:
        # The connection that admits requests, not a separate pool: a pool
        # parsing the URL differently once answered while every call failed.
        if mux is not None:
            await mux.ping()
        else:
            await app[T.REDIS].ping()
    except Exception as exc:  # any failure means "not ready", never a 500
        cls, message = error_fields(exc, url)
        state.update(ready=False, error_class=cls, error=message)
    return state


async def readyz(request: web.Request) -> web.Response:
    """Redis and every network in the body; 200 or 503 by ``server.ready_requires``."""
    app = request.app
    requires = app[T.CONFIG].server.ready_requires
    redis = await _redis_state(app)
    networks = {name: pool.report() for name, pool in app[T.POOLS].items()}
    problems: list[str] = []
    if not redis["ready"]:
        problems.append(f"redis: {redis['error_class']}")
    for name, net in networks.items():
        if not net["ready"]:
            problems.append(f"{name}: no upstream node in service")
    failed: list[str] = []
    for item in requires:
        if item == "redis":
            ok = redis["ready"]
        elif item == "any_network":
            ok = any(net["ready"] for net in networks.values())
        elif item == "all_networks":
            ok = all(net["ready"] for net in networks.values())
        else:
            ok = item in networks and networks[item]["ready"]
        if not ok:
            failed.append(item)
    body = {
        "ready": not failed,
        "failed_requirements": failed,
        "requires": list(requires),
        "problems": problems,
        "redis": redis,
        "networks": networks,
    }
    return web.json_response(body, status=503 if failed else 200, headers=_NO_STORE)


async def readyz_network(request: web.Request) -> web.Response:
    """One network alone (plus Redis when ``ready_requires`` names it)."""
    app = request.app
    name = request.match_info["network"]
    pool = app[T.POOLS].get(name)
    if pool is None:
        return web.json_response(
            {"ready": False, "error": f"no network named {name!r}"}, status=404, headers=_NO_STORE
        )
    net = pool.report()
    body: dict[str, Any] = {"ready": net["ready"], "network": name, **net}
    if "redis" in app[T.CONFIG].server.ready_requires:
        redis = await _redis_state(app)
        body["redis"] = redis
        body["ready"] = net["ready"] and redis["ready"]
    return web.json_response(body, status=200 if body["ready"] else 503, headers=_NO_STORE)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text; routed only on the metrics listener (``server.metrics_listen``)."""
    body = request.app[METRICS].exposition()
    resp = web.Response(body=body, headers=_NO_STORE)
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    resp.charset = "utf-8"
    return resp


def setup_ops_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/readyz/{network}", readyz_network)
