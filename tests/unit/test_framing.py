"""The one HTTP/1.1 framing of the mock node and the bench client (gateway/demo/framing.py)."""

from __future__ import annotations

import pytest

from gateway.demo.framing import FramingError, RequestFramer, ResponseFramer

POST = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]"
CHUNKED = (
    b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n"
)


def _framer() -> RequestFramer:
    return RequestFramer(max_head=1024, max_body=64)


def test_requests_split_anywhere_and_pipelined() -> None:
    wire = POST + CHUNKED + b"GET / HTTP/1.0\r\n\r\n"
    for cut in range(len(wire)):
        framer = _framer()
        got = framer.feed(wire[:cut]) + framer.feed(wire[cut:])
        assert got == [(b"POST", b"[]", True), (b"POST", b"abcde", True), (b"GET", b"", False)]
        assert framer.error is None


def test_one_byte_at_a_time() -> None:
    framer = _framer()
    got = [r for i in range(len(CHUNKED)) for r in framer.feed(CHUNKED[i : i + 1])]
    assert got == [(b"POST", b"abcde", True)]


def test_connection_close_and_keep_alive_headers() -> None:
    framer = _framer()
    close = b"POST / HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    keep = b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
    assert framer.feed(keep) == [(b"POST", b"", True)]
    assert framer.feed(close) == [(b"POST", b"", False)]


@pytest.mark.parametrize(
    ("wire", "status"),
    [
        (b"garbage\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n" + b"x" * 65, 413),
        (b"POST / HTTP/1.1\r\nX-Big: " + b"y" * 2000, 431),
    ],
)
def test_bad_streams_keep_the_requests_before_them(wire: bytes, status: int) -> None:
    framer = _framer()
    assert framer.feed(POST + wire) == [(b"POST", b"[]", True)]
    assert isinstance(framer.error, FramingError) and framer.error.status == status
    assert framer.feed(POST) == []  # the stream is done for


def test_responses_read_until_close_and_no_body_statuses() -> None:
    framer = ResponseFramer(lambda *parts: parts)
    assert framer.feed(b"HTTP/1.1 204 No Content\r\n\r\n") == [(204, b"", False, False)]
    assert framer.feed(b"HTTP/1.1 503 x\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}") == [
        (503, b"{}", True, False)
    ]
    assert framer.eof() is None  # nothing open
    assert framer.feed(b"HTTP/1.0 200 OK\r\n\r\npart") == []
    assert framer.feed(b"ial") == []
    assert framer.eof() == (200, b"partial", False, True)


def test_truncated_length_body_is_not_completed_by_eof() -> None:
    framer = ResponseFramer(lambda *parts: parts)
    assert framer.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort") == []
    assert framer.eof() is None


def test_bad_status_line_raises() -> None:
    with pytest.raises(FramingError):
        ResponseFramer(lambda *parts: parts).feed(b"garbage\r\n\r\n")
