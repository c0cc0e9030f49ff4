"""rpc.py and auth.py: pure functions, no I/O."""

from __future__ import annotations

import orjson
import pytest

from gateway import rpc
from gateway.auth import BAD_KEY, NO_KEY, extract_key, generate_key, key_hash, well_formed

METHODS = frozenset({"eth_call"})


def test_keys_have_one_shape() -> None:
    keys = {generate_key() for _ in range(200)}
    assert len(keys) == 200 and all(well_formed(k) for k in keys)
    for bad in ("", "a" * 31, "a" * 33, "a" * 31 + "-", "é" * 32, "a" * 31 + " "):
        assert not well_formed(bad)
    assert key_hash("x") == key_hash("x") and len(key_hash("x")) == 64


@pytest.mark.parametrize(
    "path,header,want",
    [
        ("k1", None, "k1"),
        ("", "Bearer k1", "k1"),
        ("", "bearer  k1 ", "k1"),
        ("k1", "Bearer k1", "k1"),
        ("k1", "Bearer k2", BAD_KEY),
        ("", "Basic k1", BAD_KEY),
        ("", "Bearer", BAD_KEY),
        ("", None, NO_KEY),
    ],
)
def test_extract_key(path: str, header: str | None, want: str | None) -> None:
    assert extract_key(path, header) == want


def test_big_ints_keep_their_digits() -> None:
    body = b'{"id":123456789012345678901234567890,"x":[1.50, -0]}'
    parsed = rpc.loads(body)
    assert rpc.has_float_id(parsed)
    exact = rpc.loads_exact(body)
    assert orjson.dumps(exact) == b'{"id":123456789012345678901234567890,"x":[1.50,-0]}'
    assert rpc.error_body(rpc.PARSE_ERROR, exact["id"]).startswith(
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,'
    )


@pytest.mark.parametrize("body", [b"", b"{", b"NaN", b"[1,]", b"\xff", b"[" * 100_000])
def test_parse_errors(body: bytes) -> None:
    with pytest.raises(rpc.ParseError):
        rpc.loads(body)
    with pytest.raises(rpc.ParseError):
        rpc.loads_exact(body)


def test_validate_call() -> None:
    ok = rpc.validate_call({"jsonrpc": "2.0", "id": 1, "method": "eth_call"}, METHODS)
    assert ok.forwardable and ok.answered
    note = rpc.validate_call({"jsonrpc": "2.0", "method": "eth_call"}, METHODS)
    assert note.forwardable and not note.answered
    unknown_note = rpc.validate_call({"jsonrpc": "2.0", "method": "x"}, METHODS)
    assert unknown_note.error is rpc.METHOD_NOT_FOUND and not unknown_note.answered
    bad = rpc.validate_call({"jsonrpc": "2.0", "id": True, "method": "eth_call"}, METHODS)
    assert bad.error is rpc.INVALID_REQUEST and bad.id is None and bad.answered


def test_every_error_has_its_status() -> None:
    table = {
        rpc.UNAUTHORIZED: 401,
        rpc.FORBIDDEN: 403,
        rpc.RATE_LIMITED: 429,
        rpc.PARSE_ERROR: 200,
        rpc.INVALID_REQUEST: 200,
        rpc.METHOD_NOT_FOUND: 200,
        rpc.BODY_TOO_LARGE: 413,
        rpc.UNSUPPORTED_MEDIA_TYPE: 415,
        rpc.METHOD_NOT_ALLOWED: 405,
        rpc.UPSTREAM_UNAVAILABLE: 502,
        rpc.UPSTREAM_TIMEOUT: 504,
        rpc.SERVICE_UNAVAILABLE: 503,
    }
    for kind, status in table.items():
        assert kind.http_status == status
        body = orjson.loads(rpc.error_body(kind, "a", {"d": 1}))
        assert body == {
            "jsonrpc": "2.0",
            "id": "a",
            "error": {"code": kind.code, "message": kind.message, "data": {"d": 1}},
        }
