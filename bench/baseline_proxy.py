"""``python -m bench.baseline_proxy``: the pass-through proxy "written the obvious way".

An aiohttp app with one shared ``ClientSession`` that forwards the request
body bytes upstream and relays the answer bytes: no auth, no rate limit, no
JSON parsing.  It is the yardstick for the gateway: the ratio gateway/proxy
shows what auth, limiting, validation and usage accounting cost on top of
merely being an aiohttp proxy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence

import aiohttp
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)
ROUTES = web.AppKey("routes", dict[str, str])
_UNAVAILABLE = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Upstream unavailable"}}'
)


def _upstream_for(routes: dict[str, str], path: str) -> str:
    """Longest matching path prefix wins; "" is the catch-all."""
    for prefix in sorted(routes, key=len, reverse=True):
        if path == prefix or path.startswith(prefix + "/") or prefix == "":
            return routes[prefix]
    raise web.HTTPNotFound()


async def forward(request: web.Request) -> web.Response:
    upstream = _upstream_for(request.app[ROUTES], request.path)
    body = await request.read()
    session = request.app[SESSION]
    try:
        async with session.post(
            upstream, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            payload = await resp.read()
            return web.Response(status=resp.status, body=payload, content_type="application/json")
    except (aiohttp.ClientError, TimeoutError):
        return web.Response(status=502, body=_UNAVAILABLE, content_type="application/json")


def create_app(routes: dict[str, str], connections: int = 256) -> web.Application:
    app = web.Application()
    app[ROUTES] = routes

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=connections)
        timeout = aiohttp.ClientTimeout(total=10, connect=2)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            app[SESSION] = session
            yield

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/{tail:.*}", forward)
    return app


def parse_routes(values: Sequence[str]) -> dict[str, str]:
    """``URL`` (every path) or ``/prefix=URL`` (that prefix only)."""
    routes: dict[str, str] = {}
    for value in values:
        if value.startswith("/") and "=" in value:
            prefix, url = value.split("=", 1)
            routes[prefix.rstrip("/")] = url
        else:
            routes[""] = value
    return routes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.baseline_proxy",
        description="Minimal aiohttp pass-through JSON-RPC proxy (no auth, no limits), "
        "the baseline the gateway is compared against.",
    )
    p.add_argument(
        "--upstream",
        action="append",
        required=True,
        help="upstream URL for every path, or /prefix=URL for one prefix (repeatable)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8546)
    p.add_argument("--connections", type=int, default=256, help="upstream pool size")
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        create_app(parse_routes(args.upstream), args.connections),
        host=args.host,
        port=args.port,
        access_log=None,
        print=lambda msg: print(msg, flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
