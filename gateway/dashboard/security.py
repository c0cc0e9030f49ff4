"""Headers and error pages for every dashboard answer.

The dashboard is a same-origin app: no CORS (RPC paths allow it, these
never do), no framing, scripts only from our own static folder, and no
caching of pages that show keys. Errors become plain HTML pages; a
traceback never reaches the browser.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler
from redis.exceptions import RedisClusterException, RedisError

from gateway.dashboard.views import render

log = logging.getLogger("gateway.dashboard")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_TITLES = {
    403: "Forbidden",
    404: "Page not found",
    405: "Method not allowed",
    413: "Request too large",
    503: "Service unavailable",
}
_TEXT = {
    403: "This form was out of date or came from another site, so nothing was changed. "
    "Go back, reload the page and try again.",
    404: "There is nothing here, or it belongs to another account.",
    405: "This address does not accept that kind of request.",
    413: "The form sent was too large.",
    503: "The dashboard cannot reach its database right now. Try again in a moment.",
}


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            _harden(exc)
            raise
        response = _error_page(request, exc.status, _TEXT.get(exc.status) or exc.reason)
        if isinstance(exc, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
    except (RedisError, RedisClusterException) as exc:
        log.warning("dashboard: redis unavailable: %s", type(exc).__name__)
        response = _error_page(request, 503, _TEXT[503])
    except Exception:
        # the route pattern, not the path: nothing a client typed reaches the log
        route = request.match_info.route.resource
        log.exception(
            "dashboard: internal error route=%s", route.canonical if route is not None else "-"
        )
        response = _error_page(request, 500, "Something went wrong on our side.")
    _harden(response)
    return response


def _harden(response: web.StreamResponse) -> None:
    response.headers.update(HEADERS)
    for name in [h for h in response.headers if h.lower().startswith("access-control-")]:
        del response.headers[name]
    if response.content_type == "text/html" or response.status >= 300:
        response.headers["Cache-Control"] = "no-store"


def _error_page(request: web.Request, status: int, text: str) -> web.Response:
    title = _TITLES.get(status, "Error")
    return render(request, "error.html", {"title": title, "text": text}, status=status)
