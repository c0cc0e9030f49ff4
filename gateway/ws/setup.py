"""``setup_ws(app, handlers)``: the WebSocket routes, service and lifecycle hooks."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from gateway import typedefs as T
from gateway.ops.metrics import METRICS
from gateway.rpc.http import RpcHttp
from gateway.ws.calls import SubscriptionMethods
from gateway.ws.readiness import ws_state
from gateway.ws.service import WS, WsService
from gateway.ws.upgrade import WsRoute


def add_ws_route(app: web.Application, handler: RpcHttp, path: str) -> None:
    """GET on an RPC path: upgrades go to the socket, other GETs to HTTP (405).

    Call it right before the HTTP handler's ``*`` route for the same path:
    aiohttp then puts both routes on one resource (it reuses the last one
    when the path repeats), GET first, so a POST costs no extra path match
    and a GET reaches this route before ``*``.
    """
    app.router.add_get(path, WsRoute(handler).handle, allow_head=False)


def setup_ws(app: web.Application, handlers: Sequence[RpcHttp]) -> None:
    """Create the service (``WS``), its cleanup context and its drain hook.

    ``eth_subscribe`` / ``eth_unsubscribe`` become local methods of each
    network's pipeline, for the ``ws`` transport only.
    """
    cfg = app[T.CONFIG]
    if not cfg.ws.enabled:
        return
    svc = WsService(cfg, app[METRICS])
    app[WS] = svc
    for handler in handlers:
        SubscriptionMethods(svc, handler.network.name).register(handler.pipeline.local)
    app.cleanup_ctx.append(svc.ctx)
    nets = {handler.network.name: handler.network for handler in handlers}
    app[T.WS_STATE] = lambda name: ws_state(
        svc.feeds.get(name), app.get(T.POOLS, {}).get(name), nets[name].ws_upstreams
    )
    app.on_shutdown.append(svc.drain)
