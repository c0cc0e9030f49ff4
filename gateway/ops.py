"""Operator endpoints: /healthz, /readyz, /metrics."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway import typedefs as T


async def healthz(request: web.Request) -> web.Response:
    """The process is alive and its event loop answers."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Redis answers and every network has at least one healthy node."""
    app = request.app
    problems: list[str] = []
    try:
        await app[T.REDIS].ping()
    except Exception as exc:
        problems.append(f"redis: {type(exc).__name__}")
    for name, pool in app[T.POOLS].items():
        if pool.healthy_count() == 0:
            problems.append(f"{name}: no healthy upstream node")
    status = 200 if not problems else 503
    return web.json_response({"ready": not problems, "problems": problems}, status=status)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[T.METRICS].registry)
    resp = web.Response(body=body)
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    resp.charset = "utf-8"
    return resp


def setup_ops_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
