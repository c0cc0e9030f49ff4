"""rpc.py and auth.py: pure functions, no I/O."""

from __future__ import annotations

import orjson
import pytest

from gateway.rpc import protocol as rpc
from gateway.rpc.auth import BAD_KEY, NO_KEY, extract_key, generate_key, key_hash, well_formed

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
    assert rpc.needs_exact(parsed)
    exact = rpc.loads_exact(body)
    assert orjson.dumps(exact) == b'{"id":123456789012345678901234567890,"x":[1.50,-0]}'
    assert rpc.error_body(rpc.PARSE_ERROR, exact["id"]).startswith(
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,'
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"NaN",
        b"[1,]",
        b"\xff",
        b"[" * 100_000,
        '{"a":1}'.encode("utf-16"),  # JSON on the wire is UTF-8 only
        b"\xef\xbb\xbf{}",  # nor a BOM
    ],
)
def test_parse_errors(body: bytes) -> None:
    with pytest.raises(rpc.ParseError):
        rpc.loads(body)
    with pytest.raises(rpc.ParseError):
        rpc.loads_exact(body)
    with pytest.raises(rpc.ParseError):
        rpc.parse_body(body)


def test_validate_call() -> None:
    ok = rpc.validate_call({"jsonrpc": "2.0", "id": 1, "method": "eth_call"}, METHODS)
    assert ok.error is None and ok.answered
    note = rpc.validate_call({"jsonrpc": "2.0", "method": "eth_call"}, METHODS)
    assert note.error is None and not note.answered
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
        rpc.REQUEST_TIMEOUT: 408,
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


# -- canonical forwarding ---------------------------------------------------------
def _call(body: bytes) -> rpc.Call:
    return rpc.validate_call(rpc.parse_body(body), METHODS)


def test_only_validated_members_are_encoded() -> None:
    call = _call(
        b'{"jsonrpc":"2.0","id":"x","method":"eth_call","Method":"debug_x",'
        b'"params":[{"to":"0x1"}],"PARAMS":[1],"extra":{"method":"admin_peers"}}'
    )
    assert rpc.encode_call(call, 42) == (
        b'{"jsonrpc":"2.0","id":42,"method":"eth_call","params":[{"to":"0x1"}]}'
    )
    note = _call(b'{"jsonrpc":"2.0","method":"eth_call"}')
    assert rpc.encode_call(note, 9) == b'{"jsonrpc":"2.0","method":"eth_call","params":[]}'
    assert rpc.encode_batch([call, note], 7) == (
        b'[{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[{"to":"0x1"}]},'
        b'{"jsonrpc":"2.0","method":"eth_call","params":[]}]'
    )


@pytest.mark.parametrize(
    "literal", [b"18446744073709551616", b"1.50", b"-1e400", b"1.5e400", b"123456789012345678901"]
)
def test_params_numbers_are_forwarded_exactly(literal: bytes) -> None:
    call = _call(b'{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[' + literal + b"]}")
    assert rpc.encode_call(call, 1).endswith(b'"params":[' + literal + b"]}")


def test_valid_json_orjson_refuses_is_not_a_parse_error() -> None:
    parsed = rpc.parse_body(b'{"jsonrpc":"2.0","id":1.5e400,"method":"eth_call"}')
    call = rpc.validate_call(parsed, METHODS)
    assert call.error is None and orjson.dumps(call.id) == b"1.5e400"
    with pytest.raises(rpc.ParseError):  # parses, but could never be encoded again
        rpc.parse_body(b'{"jsonrpc":"2.0","id":"\\ud800","method":"eth_call"}')


@pytest.mark.parametrize(
    "client_id", [b"9007199254740993", b"18446744073709551616", b'"abc"', b"null", b"-0.0"]
)
def test_restore_single_splices_the_client_id(client_id: bytes) -> None:
    call = _call(b'{"jsonrpc":"2.0","id":' + client_id + b',"method":"eth_call"}')
    big = b'"0x' + b"ab" * 1000 + b'"'
    geth = b'{"jsonrpc":"2.0","id":5,"result":' + big + b"}\n"
    body, is_error = rpc.restore_single(geth, 5, call.id)
    assert body == b'{"jsonrpc":"2.0","id":' + client_id + b',"result":' + big + b"}\n"
    assert not is_error
    other_order = b'{"result":' + big + b',"id":5,"jsonrpc":"2.0"}'
    body, _ = rpc.restore_single(other_order, 5, call.id)
    assert b'"id":' + client_id in body and orjson.loads(body)["result"] == orjson.loads(big)
    body, is_error = rpc.restore_single(
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}', 5, call.id
    )
    assert is_error and body.startswith(b'{"jsonrpc":"2.0","id":' + client_id + b",")


@pytest.mark.parametrize(
    "reply",
    [
        b"<html>bad gateway</html>",
        b"",
        b'{"jsonrpc":"2.0","id":6,"result":1}',  # someone else's answer
        b'{"jsonrpc":"2.0","id":5}',  # neither result nor error
        b'{"jsonrpc":"2.0","id":5,"result":"0x1"',  # truncated, usual head
        b"[]",
    ],
)
def test_restore_single_refuses_what_is_not_an_answer(reply: bytes) -> None:
    with pytest.raises(rpc.BadAnswer):
        rpc.restore_single(reply, 5, 1)


def test_restore_batch_maps_answers_back_by_gateway_id() -> None:
    calls = [
        _call(b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"eth_call"}'),
        _call(b'{"jsonrpc":"2.0","id":"b","method":"nope"}'),
        _call(b'{"jsonrpc":"2.0","method":"eth_call"}'),  # notification
        _call(b'{"jsonrpc":"2.0","id":null,"method":"eth_call"}'),
        _call(b'{"jsonrpc":"2.0","id":4,"method":"eth_call"}'),
    ]
    # out of order, one missing (gid 13), ids as a JavaScript node would not touch
    reply = b'[{"jsonrpc":"2.0","id":12,"result":"0x2"},{"jsonrpc":"2.0","id":10,"result":1.50}]'
    body, is_error = rpc.restore_batch(reply, calls, 10)
    assert is_error  # the missing answer
    assert body == (
        b'[{"jsonrpc":"2.0","id":18446744073709551616,"result":1.50},'
        b'{"jsonrpc":"2.0","id":"b","error":{"code":-32601,'
        b'"message":"the method nope does not exist/is not available"}},'
        b'{"jsonrpc":"2.0","id":null,"result":"0x2"},'
        b'{"jsonrpc":"2.0","id":4,"error":{"code":-32603,'
        b'"message":"Upstream unavailable: no answer from node",'
        b'"data":{"reason":"no answer from node"}}}]'
    )
    with pytest.raises(rpc.BadAnswer):
        rpc.restore_batch(b"not json", calls, 10)


def test_a_batch_whose_forwarded_calls_are_notifications_needs_no_node_answer() -> None:
    calls = [
        _call(b'{"jsonrpc":"2.0","id":1,"method":"nope"}'),
        _call(b'{"jsonrpc":"2.0","method":"eth_call"}'),
    ]
    body, is_error = rpc.restore_batch(b"", calls, 1)  # the node answered 204
    assert orjson.loads(body) == [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32601, "message": "the method nope does not exist/is not available"},
        }
    ]
    assert not is_error
