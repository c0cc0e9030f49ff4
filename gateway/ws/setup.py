"""``plug_ws``: the WebSocket service, its cleanup context and drain hook (a ``gateway.plugin``).

The upgrade route itself is the app's (``app.py``): a GET that asks to
upgrade goes to the network's ``ws.upgrade.WsRoute``, a peer of its HTTP
adapter, both made whole by the app's one RPC cleanup context.
"""

from __future__ import annotations

from aiohttp import web

from gateway import typedefs as T
from gateway.plugin import Parts
from gateway.telemetry.metrics import METRICS
from gateway.ws.calls import SubscriptionMethods
from gateway.ws.readiness import ws_state
from gateway.ws.service import WS, WsService


def plug_ws(app: web.Application, parts: Parts) -> None:
    """Create the service (``WS``), its cleanup context and its drain hook.

    ``eth_subscribe`` / ``eth_unsubscribe`` become local methods of each
    network (``parts.local``: its pipeline's, by network name), for the
    ``ws`` transport only.
    """
    cfg, local = parts.cfg, parts.local
    if not cfg.ws.enabled:
        return
    svc = WsService(cfg, app[METRICS])
    app[WS] = svc
    for name, methods in local.items():
        SubscriptionMethods(svc, name).register(methods)
    app.cleanup_ctx.append(svc.ctx)
    nets = {net.name: net for net in cfg.networks}
    app[T.WS_STATE] = lambda name: ws_state(
        svc.feeds.get(name), app.get(T.POOLS, {}).get(name), nets[name].ws_upstreams
    )
    app.on_shutdown.append(svc.drain)
