"""The admin app: one aiohttp application mounted at ``/admin`` on the metrics listener.

``plug_admin`` (in ``gateway.app.PLUGINS``) sets it up on the gateway app:
the cordon book and the audit log (one cleanup context), this module's
own routes, and ``T.ADMIN_MOUNT``, which the metrics listener
(``gateway.ops.metricsport``) calls with its app to mount a fresh admin app
there. Under ``serve --workers`` each worker serves the same app on a unix
socket instead (``gateway.admin.socket``), which the supervisor's listener
relays to.

Adding endpoints from another module: in its own ``plug(app, parts)``,
listed after ``plug_admin``, call ``add_admin_routes(app, adder)``;
``adder(admin_app)`` runs once per mounted admin app and adds routes with
``admin_app.router.add_get("/thing", handler)`` (paths relative to
``/admin``). Its handlers get the gateway app from ``admin_source(request)``
and the caller from ``caller(request)`` (the token's name and role; both in
``gateway.admin.calls``); the
middleware has already refused a missing or wrong token (401) and a read
token on anything but GET (403). A write handler may describe what it did
for the audit log with ``audit(request, action, target, **detail)``; every
write is audited either way, with its status.

Answers are JSON, errors too (``{"error": "..."}``): a ``StoreError`` is a
400 (a ``NotFound`` 404), a bad JSON body a 400, Redis unreachable a 503,
anything unexpected a 500 with no traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from redis.exceptions import RedisClusterException, RedisError

from gateway import typedefs as T
from gateway.admin.calls import admin_source, answer, json_error, route_of
from gateway.admin.nodes import add_node_routes
from gateway.admin.records import add_record_routes
from gateway.admin.reload import add_reload_routes
from gateway.admin.socket import worker_socket_ctx
from gateway.config import AdminToken
from gateway.ops.adminauth import READ_METHODS, check
from gateway.plugin import Parts, running
from gateway.redis.clients import pubsub_connect
from gateway.store.accounts import NotFound, StoreError
from gateway.store.audit import AuditLog, entry
from gateway.store.cordons import CordonBook, State

log = logging.getLogger("gateway.admin")

MAX_BODY = 1 << 20  # admin requests are small; a bigger body is refused (413)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def plug_admin(app: web.Application, parts: Parts) -> None:
    """The admin API's plug-in: routes, cordons, audit, and the listener's mount."""
    adders: list[Callable[[web.Application], None]] = [
        add_node_routes,
        add_record_routes,
        add_reload_routes,
        _audit_routes,
    ]
    app[T.ADMIN_ROUTES] = adders

    def mount(root: web.Application) -> None:
        root.add_subapp("/admin", build_admin_app(app))

    app[T.ADMIN_MOUNT] = mount
    app.cleanup_ctx.append(_cordons_ctx)
    app.cleanup_ctx.append(worker_socket_ctx)


def add_admin_routes(app: web.Application, adder: Callable[[web.Application], None]) -> None:
    """Add endpoints to the admin API (see the module docstring); after ``plug_admin``."""
    routes = app.get(T.ADMIN_ROUTES)
    if routes is None:
        raise RuntimeError("add_admin_routes: plug_admin has not run (list it first in PLUGINS)")
    routes.append(adder)


def build_admin_app(source: web.Application) -> web.Application:
    """A fresh admin app serving ``source`` (the gateway app), every route added."""
    admin = web.Application(middlewares=[_guard], client_max_size=MAX_BODY)
    admin[T.ADMIN_SOURCE] = source
    for adder in source[T.ADMIN_ROUTES]:
        adder(admin)
    admin.router.add_route("*", "/{tail:.*}", _not_found)
    return admin


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    source = admin_source(request)
    tokens = source[T.CONFIG].admin.tokens
    who, status, why = check(
        tokens, request.headers.get("Authorization"), request.method, route_of(request)
    )
    if who is None:
        return json_error(401, why, hint="send Authorization: Bearer <admin token>")
    request[T.ADMIN_CALLER] = who
    writes = request.method.upper() not in READ_METHODS
    if status:
        if writes:
            await _audit(source, request, who, status)
        return json_error(status, why)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = json_error(exc.status, exc.reason or exc.text or "refused")
    except NotFound as exc:
        response = json_error(404, str(exc))
    except StoreError as exc:
        response = json_error(400, str(exc))
    except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
        log.error(
            "admin call failed token=%s route=%s: Redis: %s", who.name, route_of(request), exc
        )
        response = json_error(
            503, "Redis is unavailable; the call may not have completed: try it again"
        )
    except Exception:
        log.exception("admin call failed token=%s route=%s", who.name, route_of(request))
        response = json_error(500, "the admin call failed; the gateway's log says why")
    if writes:
        await _audit(source, request, who, response.status)
    return response


async def _audit(
    source: web.Application, request: web.Request, who: AdminToken, status: int
) -> None:
    did = request.get(T.ADMIN_AUDIT) or {
        "action": f"{request.method} {route_of(request)}",
        "target": route_of(request),
        "detail": {},
    }
    item = entry(who.name, did["action"], did["target"], status, did["detail"])
    try:
        await source[T.AUDIT].append(item)
    except Exception as exc:  # the write happened; a lost audit line is logged, not a 500
        log.error("audit entry not written token=%s action=%s: %s", who.name, did["action"], exc)


async def _not_found(request: web.Request) -> web.Response:
    return json_error(404, f"no admin endpoint {request.method} {request.path}")


def _audit_routes(admin: web.Application) -> None:
    admin.router.add_get("/audit", _audit_view)


async def _audit_view(request: web.Request) -> web.Response:
    """GET /admin/audit?limit=N: the newest entries first."""
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        return json_error(400, "limit: expected an integer")
    rows = await admin_source(request)[T.AUDIT].recent(limit)
    return answer({"entries": rows})


async def _cordons_ctx(app: web.Application) -> AsyncIterator[None]:
    """This process's cordon book, following Redis; the audit log beside it."""
    cfg = app[T.CONFIG]
    store = app[T.STORE]
    url = app[T.REDIS_URL]
    pools = app[T.POOLS]
    app[T.AUDIT] = AuditLog(store.redis, cfg.redis.prefix, cfg.admin.audit_cap)

    def apply(state: State) -> None:
        for name, pool in pools.items():
            for node in pool.nodes:
                info = state.get(f"{name}/{node.name}")
                if info != node.cordon:
                    log.info(
                        "node %s network=%s node=%s by=%s",
                        "cordoned" if info is not None else "uncordoned",
                        name,
                        node.name,
                        (info or node.cordon or {}).get("by"),
                    )
                    node.cordon = info
                if node.metrics is not None:
                    node.metrics.cordoned.set(0 if info is None else 1)

    book = CordonBook(
        store.redis,
        cfg.redis.prefix,
        lambda: pubsub_connect(url),
        apply,
        log_interval_s=cfg.redis.failure_log_interval_s,
    )
    app[T.CORDONS] = book
    await book.refresh()
    async with running(book.run(), "cordons"):
        yield
