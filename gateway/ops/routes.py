"""Operator endpoints: /healthz, /readyz, /readyz/<network>, /metrics.

``/healthz`` answers while the event loop runs (a liveness probe).

``/readyz`` checks Redis (a PING on the hot path's own connection: the
multiplexed one the admission check uses, or the cluster client) and each
network. On the public port its JSON body says ready or not, overall and
per network (with node counts, the head, and the WebSocket side: ``ok``,
``untried`` or ``no WebSocket upstream``, the last listed under
``degraded``), and nothing of what is behind the gateway: no node URL, no
Redis address, no node's error text (it may name a host). The same paths
on the metrics listener (``server.metrics_listen``, private) add every
node (redacted URL, in service or why not, chain id, head, last error) and
the Redis address and error. Which failures make it 503 is
``server.ready_requires`` (default ``["redis", "any_network"]``): one opBNB
provider outage then keeps a pod serving BSC, instead of taking every pod
out of the Service (docs/DEPLOYING.md "Readiness").

``/readyz/<network>`` is one network alone: 200 while it has a node in
service (and Redis answers, when ``ready_requires`` names ``redis``), for a
per-network Service or an external load balancer; 404 for a network that is
not configured.

``/metrics`` is the Prometheus text of this process, or of every worker in
multiprocess mode (see ``gateway.telemetry.metrics``); it is served on its own
listener (``gateway.ops.metricsport``), not among the public routes here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway import typedefs as T
from gateway.config.redact import redact_url
from gateway.ops.fallback import setup_fallback_routes
from gateway.ops.readysnap import snapshots
from gateway.redis.failurelog import error_fields
from gateway.telemetry.metrics import METRICS

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


def _network(app: web.Application, name: str, detailed: bool) -> dict[str, Any]:
    """One network as /readyz shows it: the public view drops the nodes."""
    net = app[T.POOLS][name].report()
    state = app.get(T.WS_STATE)
    if state is not None:
        net["websocket"] = state(name)
    if not detailed:
        net.pop("upstreams", None)
    return net


async def ready_report(app: web.Application, detailed: bool) -> tuple[dict[str, Any], int]:
    """The /readyz body and status; ``detailed`` adds nodes and the Redis address."""
    requires = app[T.CONFIG].server.ready_requires
    redis = await _redis_state(app)
    networks = {name: _network(app, name, detailed) for name in app[T.POOLS]}
    problems: list[str] = []
    if not redis["ready"]:
        problems.append(f"redis: {redis['error_class']}")
    degraded: list[str] = []
    for name, net in networks.items():
        if not net["ready"]:
            problems.append(f"{name}: no upstream node in service")
        if net.get("websocket") == "no WebSocket upstream":
            degraded.append(f"{name}: no WebSocket upstream")
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
        "degraded": degraded,
        "redis": redis if detailed else {"ready": redis["ready"]},
        "networks": networks,
    }
    return body, 503 if failed else 200


async def network_report(
    app: web.Application, name: str, detailed: bool
) -> tuple[dict[str, Any], int]:
    """One network alone (plus Redis when ``ready_requires`` names it); 404 if unknown."""
    if name not in app[T.POOLS]:
        return {"ready": False, "error": f"no network named {name!r}"}, 404
    net = _network(app, name, detailed)
    body: dict[str, Any] = {"ready": net["ready"], "network": name, **net}
    if "redis" in app[T.CONFIG].server.ready_requires:
        redis = await _redis_state(app)
        body["redis"] = redis if detailed else {"ready": redis["ready"]}
        body["ready"] = net["ready"] and redis["ready"]
    return body, 200 if body["ready"] else 503


async def readyz(request: web.Request) -> web.Response:
    """Ready or not, overall and per network; 200 or 503 by ``server.ready_requires``."""
    body, status = await ready_report(request.app, detailed=False)
    return web.json_response(body, status=status, headers=_NO_STORE)


async def readyz_network(request: web.Request) -> web.Response:
    """One network alone, public view."""
    body, status = await network_report(request.app, request.match_info["network"], False)
    return web.json_response(body, status=status, headers=_NO_STORE)


async def readyz_details(request: web.Request) -> web.Response:
    """/readyz with every node and the Redis address: metrics listener only."""
    body, status = await ready_report(request.app[T.READY_SOURCE], detailed=True)
    return web.json_response(body, status=status, headers=_NO_STORE)


async def readyz_network_details(request: web.Request) -> web.Response:
    """/readyz/<network> with its nodes: metrics listener only."""
    app, name = request.app[T.READY_SOURCE], request.match_info["network"]
    body, status = await network_report(app, name, True)
    return web.json_response(body, status=status, headers=_NO_STORE)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text; routed only on the metrics listener (``server.metrics_listen``)."""
    body = request.app[METRICS].exposition()
    resp = web.Response(body=body, headers=_NO_STORE)
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    resp.charset = "utf-8"
    return resp


def setup_ops_routes(app: web.Application) -> None:
    """/healthz, /readyz, then /favicon.ico and the JSON 404 catch-all: call it last."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/readyz/{network}", readyz_network)
    setup_fallback_routes(app)
    app.cleanup_ctx.append(_ready_snapshots)


async def _ready_snapshots(app: web.Application) -> AsyncIterator[None]:
    """``serve --workers``: the supervisor's listener serves these workers' details."""
    async with snapshots(app, ready_report):
        yield
