"""The error catalogue: every error the gateway answers, with its JSON-RPC code and
its HTTP status, and the one function that turns any of them into a reply body.

Also the CORS headers every RPC answer carries, errors included: the pipeline's
answers and the server's own refusals of a request's framing (a 417) alike, so
a browser sees the error and not a CORS failure. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.upstream.errors import UpstreamError

__all__ = [
    "BAD_BODY",
    "BODY_TOO_LARGE",
    "CORS_HEADERS",
    "FILTER_NOT_FOUND",
    "FORBIDDEN",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_METHOD_NAME",
    "METHOD_NOT_ALLOWED",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RATE_LIMITED",
    "REQUEST_TIMEOUT",
    "SERVICE_UNAVAILABLE",
    "TOO_MANY_FILTERS",
    "UNAUTHORIZED",
    "UNSUPPORTED_MEDIA_TYPE",
    "UPSTREAM_TIMEOUT",
    "UPSTREAM_UNAVAILABLE",
    "ErrorKind",
    "error_body",
    "error_obj",
    "explain",
    "failure_kind",
    "reply_code",
]

CORS_HEADERS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        "RateLimit, RateLimit-Policy, Retry-After, X-Gateway-Cache, X-Gateway-Node"
    ),
}


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """One row of the error table (docs/API.md "Errors")."""

    code: int
    message: str
    http_status: int
    # The gateway's own words: a known reason follows them ("Invalid Request: empty
    # batch"). False where the words are the contract a client matches (geth's,
    # or the bare 401 that must not tell which check an unknown key failed).
    explained: bool = True


PARSE_ERROR: Final = ErrorKind(-32700, "Parse error", 200)
INVALID_REQUEST: Final = ErrorKind(-32600, "Invalid Request", 200)
# geth's words, with the method's name put in by ``call_error_obj``: ethers
# (/the method .* does not exist/i) and viem read them to fall back from
# filters to eth_getLogs polling.
METHOD_NOT_FOUND: Final = ErrorKind(
    -32601, "the method %s does not exist/is not available", 200, explained=False
)
UNAUTHORIZED: Final = ErrorKind(-32001, "Invalid authentication credentials", 401, explained=False)
FORBIDDEN: Final = ErrorKind(-32001, "Invalid authentication credentials", 403)
RATE_LIMITED: Final = ErrorKind(-32005, "Rate limit exceeded", 429)
BODY_TOO_LARGE: Final = ErrorKind(-32600, "Invalid Request", 413)
UNSUPPORTED_MEDIA_TYPE: Final = ErrorKind(-32600, "Invalid Request", 415)
METHOD_NOT_ALLOWED: Final = ErrorKind(-32600, "Invalid Request", 405)
REQUEST_TIMEOUT: Final = ErrorKind(-32600, "Invalid Request", 408)
# A body that cannot be read as sent: not the Content-Encoding it declares
# (plain JSON labelled gzip), a broken chunk. 400 like aiohttp's own answer to
# an unknown encoding (br), and no log line: the client's mistake, not ours.
BAD_BODY: Final = ErrorKind(-32600, "Invalid Request", 400)
UPSTREAM_UNAVAILABLE: Final = ErrorKind(-32603, "Upstream unavailable", 502)
UPSTREAM_TIMEOUT: Final = ErrorKind(-32603, "Upstream timeout", 504)
SERVICE_UNAVAILABLE: Final = ErrorKind(-32603, "Service unavailable", 503)
INTERNAL_ERROR: Final = ErrorKind(-32603, "Internal error", 500)
# A call the gateway refuses on its params (the eth_getLogs range guard); its
# ``data`` says why and what the limit is.
INVALID_PARAMS: Final = ErrorKind(-32602, "Invalid params", 200)
# A filter id that is unknown, expired, or another key's (geth's words).
FILTER_NOT_FOUND: Final = ErrorKind(-32000, "filter not found", 200, explained=False)
# A key at its cap of live filters (gateway/filters); ``data`` names the cap.
TOO_MANY_FILTERS: Final = ErrorKind(-32000, "too many filters", 200)
MAX_METHOD_NAME: Final = 64  # a refused method's name is echoed cut to this many characters


def error_body(kind: ErrorKind, id_: Any = None, data: Any = None) -> bytes:
    """A complete JSON-RPC error response for one call (Fragment ids keep their digits)."""
    return orjson.dumps(error_obj(kind, id_, data))


def error_obj(kind: ErrorKind, id_: Any = None, data: Any = None) -> dict[str, Any]:
    """The same error as a dict, for splicing into a batch answer (see ``explain``)."""
    message, data = explain(kind, data)
    err: dict[str, Any] = {"code": kind.code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": err}


def explain(kind: ErrorKind, data: Any) -> tuple[str, Any]:
    """``error.message`` and ``error.data`` of one error: the row's words, then the reason.

    Clients show the message and little else, so where the gateway knows why
    it refused, the message is the row's words, a colon and the reason
    (``Invalid Request: empty batch``), and ``error.data.reason`` holds the
    same; a reason given as a bare string becomes ``{"reason": ...}``. The
    row's words always come first, so a client matching them still does.
    Rows in words a client matches exactly (``explained=False``) keep them.
    """
    if data is None or not kind.explained:
        return kind.message, data
    if type(data) is str:
        data = {"reason": data}
    reason = data.get("reason") if type(data) is dict else None
    if type(reason) is str and reason:
        return f"{kind.message}: {reason}", data
    return kind.message, data


def reply_code(body: bytes) -> int:
    """The JSON-RPC error code of an answer (the first one of a batch), 0 if none.

    Called only for answers already known to hold an error or to be small,
    so a large successful reply is never parsed again.
    """
    if b'"error"' not in body:
        return 0
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 0
    for item in reply if type(reply) is list else (reply,):
        if type(item) is dict:
            error = item.get("error")
            if type(error) is dict and type(error.get("code")) is int:
                return int(error["code"])
    return 0


def failure_kind(exc: Exception) -> ErrorKind:
    """The client's error for a failed node call (``UpstreamError`` or ``BadAnswer``):
    ``UPSTREAM_TIMEOUT`` (504) for a deadline, else ``UPSTREAM_UNAVAILABLE`` (502)."""
    if isinstance(exc, UpstreamError) and exc.timeout:
        return UPSTREAM_TIMEOUT
    return UPSTREAM_UNAVAILABLE
