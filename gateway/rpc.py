"""JSON-RPC 2.0 types: parse, validate, the error catalogue. No I/O here.

Every error the gateway can answer lives in ``ERRORS``-style constants that
carry both the JSON-RPC code and the HTTP status, and ``error_body`` is the
one function that turns any of them into a reply body.

Ids are echoed exactly as sent. orjson silently turns integers beyond 64
bits into floats, so whenever a parsed id (or anything we must re-encode)
holds a float, the body is parsed again with the stdlib parser keeping every
number literal as an ``orjson.Fragment``; encoding a Fragment writes the
original digits back byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

import orjson


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """One row of the SPEC §4 error table."""

    code: int
    message: str
    http_status: int


PARSE_ERROR: Final = ErrorKind(-32700, "Parse error", 200)
INVALID_REQUEST: Final = ErrorKind(-32600, "Invalid Request", 200)
METHOD_NOT_FOUND: Final = ErrorKind(-32601, "Method not found", 200)
UNAUTHORIZED: Final = ErrorKind(-32001, "Invalid authentication credentials", 401)
FORBIDDEN: Final = ErrorKind(-32001, "Invalid authentication credentials", 403)
RATE_LIMITED: Final = ErrorKind(-32005, "Rate limit exceeded", 429)
BODY_TOO_LARGE: Final = ErrorKind(-32600, "Invalid Request", 413)
UNSUPPORTED_MEDIA_TYPE: Final = ErrorKind(-32600, "Invalid Request", 415)
METHOD_NOT_ALLOWED: Final = ErrorKind(-32600, "Invalid Request", 405)
UPSTREAM_UNAVAILABLE: Final = ErrorKind(-32603, "Upstream unavailable", 502)
UPSTREAM_TIMEOUT: Final = ErrorKind(-32603, "Upstream timeout", 504)
SERVICE_UNAVAILABLE: Final = ErrorKind(-32603, "Service unavailable", 503)
INTERNAL_ERROR: Final = ErrorKind(-32603, "Internal error", 500)


class ParseError(Exception):
    """The body is not JSON (or nests deeper than we will follow)."""


def _fragment(literal: str) -> orjson.Fragment:
    return orjson.Fragment(literal)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_exact(body: bytes | str) -> Any:
    """Parse keeping every number as its original literal (slow path)."""
    try:
        return json.loads(
            body, parse_int=_fragment, parse_float=_fragment, parse_constant=_no_constants
        )
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise ParseError(str(exc)) from None


def loads(body: bytes) -> Any:
    """Fast parse with orjson; the caller switches to ``loads_exact`` on floats."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ParseError(str(exc)) from None


def error_body(kind: ErrorKind, id_: Any = None, data: Any = None) -> bytes:
    """A complete JSON-RPC error response for one call (Fragment ids keep their digits)."""
    return orjson.dumps(error_obj(kind, id_, data))


def error_obj(kind: ErrorKind, id_: Any = None, data: Any = None) -> dict[str, Any]:
    """The same error as a dict, for splicing into a batch answer."""
    err: dict[str, Any] = {"code": kind.code, "message": kind.message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": err}


@dataclass(slots=True)
class Call:
    """One call of a request, validated; ``error`` set if it must not be forwarded."""

    obj: Any
    method: str = ""
    id: Any = None
    has_id: bool = False
    error: ErrorKind | None = None
    reason: str | None = None

    @property
    def forwardable(self) -> bool:
        return self.error is None

    @property
    def answered(self) -> bool:
        """Whether this call takes a place in the answer (notifications do not)."""
        return self.has_id or (self.error is not None and self.error is not METHOD_NOT_FOUND)


def _valid_id(value: Any) -> bool:
    return value is None or type(value) in (str, int, orjson.Fragment)


def validate_call(obj: Any, methods: Collection[str]) -> Call:
    """Check one request object against JSON-RPC 2.0 and the network's methods."""
    if type(obj) is not dict:
        return Call(obj, error=INVALID_REQUEST, reason="request must be an object")
    has_id = "id" in obj
    id_ = obj.get("id")
    if has_id and not _valid_id(id_):
        return Call(obj, error=INVALID_REQUEST, reason="id must be a string, number or null")
    call = Call(obj, id=id_, has_id=has_id)
    if obj.get("jsonrpc") != "2.0":
        call.error, call.reason = INVALID_REQUEST, 'jsonrpc must be "2.0"'
        return call
    method = obj.get("method")
    if type(method) is not str:
        call.error, call.reason = INVALID_REQUEST, "method must be a string"
        return call
    call.method = method
    params = obj.get("params")
    if params is not None and type(params) not in (list, dict):
        call.error, call.reason = INVALID_REQUEST, "params must be an array or object"
        return call
    if method not in methods:
        call.error = METHOD_NOT_FOUND
    return call


def has_float_id(parsed: Any) -> bool:
    """True when an id may have lost digits in orjson (big ints become floats)."""
    if type(parsed) is dict:
        return type(parsed.get("id")) is float
    if type(parsed) is list:
        return any(type(o) is dict and type(o.get("id")) is float for o in parsed)
    return False


def call_error_obj(call: Call) -> dict[str, Any]:
    assert call.error is not None
    return error_obj(call.error, call.id, call.reason)
