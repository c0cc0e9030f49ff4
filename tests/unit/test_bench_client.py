"""The lean HTTP client's response parser, request builder and outcome classes."""

from __future__ import annotations

import pytest

from bench.client import Response, ResponseParser, build_request, classify
from bench.units import fraction_arg, parse_duration


def test_content_length_responses_split_anywhere() -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}"
    )
    for cut in range(len(wire)):
        parser = ResponseParser()
        got = parser.feed(wire[:cut]) + parser.feed(wire[cut:])
        assert [(r.status, r.body, r.retry_after) for r in got] == [
            (200, b"hello", False),
            (429, b"{}", True),
        ]


def test_chunked_with_trailers_and_close() -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    parser = ResponseParser()
    (resp,) = [r for i in range(len(wire)) for r in parser.feed(wire[i : i + 1])]
    assert resp.body == b"abcde" and resp.close


def test_no_body_statuses_and_read_until_eof() -> None:
    parser = ResponseParser()
    (resp,) = parser.feed(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert resp.status == 204 and resp.body == b""
    assert parser.feed(b"HTTP/1.0 200 OK\r\n\r\npartial") == []
    resp2 = parser.eof()
    assert resp2 is not None and resp2.body == b"partial" and resp2.close


def test_bad_status_line_raises() -> None:
    with pytest.raises(ValueError):
        ResponseParser().feed(b"garbage\r\n\r\n")


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b'{"jsonrpc":"2.0","id":1,"result":"0x1"}', "ok"),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601}}', "rpc_error"),
        (204, b"", "ok"),
        (401, b"{}", "http_401"),
        (503, b"{}", "http_503"),
    ],
)
def test_classify(status: int, body: bytes, kind: str) -> None:
    assert classify(Response(status, body, False, False)) == kind


def test_build_request() -> None:
    raw = build_request("h", 8, "/bsc", b"{}", bearer="KEY")
    head, body = raw.split(b"\r\n\r\n")
    assert head.startswith(b"POST /bsc HTTP/1.1\r\n")
    assert b"Content-Length: 2" in head and b"Authorization: Bearer KEY" in head
    assert body == b"{}"


def test_units() -> None:
    assert parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("1.5") == 1.5
    assert parse_duration("2m") == 120
    assert parse_duration("20", "ms") == pytest.approx(0.02)
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert fraction_arg("5%") == pytest.approx(0.05)
