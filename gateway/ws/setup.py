"""``setup_ws(app, handlers)``: the WebSocket routes, service and lifecycle hooks."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from gateway import typedefs as T
from gateway.handlers import RpcHandler
from gateway.ws.service import WsService
from gateway.ws.upgrade import WsRoute


def add_ws_routes(app: web.Application, handler: RpcHandler) -> None:
    """GET on the network's paths: upgrades go to the socket, other GETs to HTTP (405).

    Must run before the HTTP handler's ``*`` routes: aiohttp takes the first
    route that matches a method.
    """
    route = WsRoute(handler)
    prefix = handler.network.prefix
    app.router.add_get(prefix, route.handle, allow_head=False)
    app.router.add_get(prefix + "/{key}", route.handle, allow_head=False)


def setup_ws(app: web.Application, handlers: Sequence[RpcHandler]) -> None:
    """Create the service (``T.WS``), its cleanup context and its drain hook."""
    cfg = app[T.CONFIG]
    if not cfg.ws.enabled:
        return
    svc = WsService(cfg, app[T.METRICS])
    app[T.WS] = svc
    app.cleanup_ctx.append(svc.ctx)
    app.on_shutdown.append(svc.drain)


def ws_service(app: web.Application) -> WsService:
    """The app's WebSocket service; fails loudly when ``setup_ws`` did not run."""
    svc = app.get(T.WS)
    if svc is None:
        raise RuntimeError("setup_ws(app) was not called, or ws.enabled is false")
    return svc
