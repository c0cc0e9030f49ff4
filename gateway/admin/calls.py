"""What an admin handler uses: the gateway app, the caller, JSON in and out, its audit line.

For the admin API's own modules and for any plug-in that adds admin routes
(``gateway.admin.api.add_admin_routes``).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway import typedefs as T
from gateway.config import AdminToken


def admin_source(request: web.Request) -> web.Application:
    """The gateway app an admin request is about."""
    source = request.config_dict.get(T.ADMIN_SOURCE)
    if source is None:
        raise RuntimeError("admin_source: not an admin request (build_admin_app was not used)")
    return source


def route_of(request: web.Request) -> str:
    """The endpoint's pattern (``/admin/keys/{key_id}``) for logs and the audit log,
    never the path as sent: a path is the caller's text and may hold a secret."""
    route = request.match_info.route
    resource = route.resource if route is not None else None
    return resource.canonical if resource is not None else "?"


def caller(request: web.Request) -> AdminToken:
    """The admin token that made this request (its name and role)."""
    return request[T.ADMIN_CALLER]


def audit(request: web.Request, action: str, target: str, **detail: Any) -> None:
    """What this write did, for its audit entry (never a secret in ``detail``)."""
    request[T.ADMIN_AUDIT] = {"action": action, "target": target, "detail": detail}


def json_error(status: int, message: str, **more: Any) -> web.Response:
    return web.json_response(
        {"error": message, **more}, status=status, headers={"Cache-Control": "no-store"}
    )


def answer(value: Any, status: int = 200) -> web.Response:
    body = orjson.dumps(value)
    return web.Response(
        body=body,
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def body_of(request: web.Request) -> dict[str, Any]:
    """The request's JSON object ({} when empty); a 400 for anything else."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise web.HTTPBadRequest(reason="the body is not JSON") from None
    if not isinstance(value, dict):
        raise web.HTTPBadRequest(reason="the body must be a JSON object")
    return value
