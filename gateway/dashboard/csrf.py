"""CSRF: every state change must send back the token its form was given.

The token is the session's own (server-side) once logged in, and the
anonymous double-submit cookie before that. Checking happens in one
middleware, before any view runs, so a request with a missing or wrong
token answers 403 and cannot change anything.
"""

from __future__ import annotations

import hmac

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.dashboard.session import visitor_of

FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CsrfRejected(web.HTTPForbidden):
    """Raised instead of running a view whose request carries no valid token."""


@web.middleware
async def csrf_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method not in SAFE_METHODS:
        visitor = visitor_of(request)
        sent = request.headers.get(HEADER, "")
        if not sent and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            value = form.get(FIELD, "")
            sent = value if isinstance(value, str) else ""
        if (
            visitor.fresh_csrf
            or not sent
            or not hmac.compare_digest(sent.encode(), visitor.csrf.encode())
        ):
            raise CsrfRejected(reason="CSRF token missing or invalid")
    return await handler(request)
