"""Access log lines that never contain an API key.

aiohttp's default access log prints the request path, and the key may be
in the path; this logger prints the network prefix only, plus the key id
the admission step resolved (an id, not the secret).
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from gateway.typedefs import KEY_ID, RPC_METHOD


def redacted_path(path: str) -> str:
    """``/bsc/<anything>`` -> ``/bsc/***``; other paths pass unchanged."""
    head, sep, rest = path[1:].partition("/")
    if sep and rest and not head.startswith(("dashboard", "static")):
        return f"/{head}/***"
    return path.split("?", 1)[0]


class AccessLogger(AbstractAccessLogger):
    """One key=value line per request: network path, method(s), status, latency, key id."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "access remote=%s http=%s path=%s rpc=%s status=%s ms=%.2f key_id=%s",
            request.remote, request.method, redacted_path(request.path),
            request.get(RPC_METHOD, "-"), response.status, time * 1000,
            request.get(KEY_ID, "-") or "-")

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)
