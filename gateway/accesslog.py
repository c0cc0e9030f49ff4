"""Access log lines that never contain an API key.

aiohttp's default access log prints the request line, and the key may be
in the path; this logger prints only the first path segment (the network
prefix, e.g. ``/bsc``) followed by ``/***`` when anything came after it,
plus the key id the admission step resolved (an id, not the secret). A
first segment that could itself be a key (anything but a short name) is
starred too, and so is an HTTP method outside the standard set.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from gateway.typedefs import KEY_ID, RPC_METHOD

_PASS_THROUGH: Final = frozenset({"dashboard", "static", "healthz", "readyz", "metrics"})
_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE"}
)
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_MAX_NAME: Final = 16  # keys are far longer; network prefixes are short names


def redacted_path(path: str) -> str:
    """``/bsc/<anything>`` -> ``/bsc/***``; an unknown, long first segment -> ``/***``."""
    path = path.split("?", 1)[0]
    head, sep, rest = path[1:].partition("/")
    if head in _PASS_THROUGH:
        return path
    if len(head) > _MAX_NAME or not _NAME_CHARS.issuperset(head):
        return "/***"
    return f"/{head}/***" if sep and rest else f"/{head}"


class AccessLogger(AbstractAccessLogger):
    """One key=value line per request: path, method(s), status, latency, key id."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        method = request.method
        self.logger.info(
            "access remote=%s http=%s path=%s rpc=%s status=%s ms=%.2f key_id=%s",
            request.remote,
            method if method in _METHODS else "other",
            redacted_path(request.path),
            request.get(RPC_METHOD, "-"),
            response.status,
            time * 1000,
            request.get(KEY_ID, "-") or "-",
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)
