"""The fuzzer's generated HTTP input, shared by the fuzzer and the door-parity test.

``budget`` (how many examples a test runs, widened by the environment),
hypothesis strategies for JSON-RPC bodies, encodings, content types,
``Expect``, paths, auth and methods, and ``http_requests``: one request of
all of those drawn together (``FuzzRequest``), written to bytes for a key.
Both tests send the same corpus (tests/integration/test_fuzz_gateway.py
judges the answers, test_door_parity.py compares the two doors'), so it is
written once here.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.helpers.rawhttp import request


def budget(examples: int) -> settings:
    """``examples`` per test in the suite, derandomized; ``scripts/fuzz`` sets the env for more.

    ``FUZZ_EXAMPLES`` overrides the count and ``FUZZ_RANDOM=1`` draws new
    seeds, for every test that sends this corpus.
    """
    return settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "0")) or examples,
        deadline=None,
        derandomize=os.environ.get("FUZZ_RANDOM") != "1",
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


FLOATS = st.floats(allow_nan=False, allow_infinity=False)
IDS = (
    st.integers(-(2**70), 2**70)
    | st.text(max_size=8)
    | st.none()
    | FLOATS
    | st.sampled_from(["1", "0x1", "", "é", "\u2028"])
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | FLOATS | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["jsonrpc", "id", "method", "params", "x", "Method"]),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)
METHODS = [
    "eth_chainId",
    "eth_blockNumber",
    "eth_getBalance",
    "eth_call",
    "eth_getLogs",
    "eth_getBlockByNumber",
    "net_version",
    "debug_x",
    "admin_peers",
    "",
]
PARAMS = (
    st.sampled_from(
        [
            [],
            ["0x0000000000000000000000000000000000000001", "latest"],
            ["0x1", False],
            ["latest", True],
            [{"fromBlock": "0x1", "toBlock": "0x2"}],
            [{"to": "0x0000000000000000000000000000000000000002", "data": "0x"}, "latest"],
        ]
    )
    | json_values
)
calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]),
        "method": st.sampled_from(METHODS),
    },
    optional={"id": IDS, "params": PARAMS, "x": json_values},
)
valid_calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "method": st.sampled_from(METHODS[:7]),
        "id": st.integers(-(2**63), 2**63) | st.text(max_size=8),
        "params": PARAMS,
    }
)


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


bodies = st.one_of(
    calls.map(dumps),
    st.lists(calls, min_size=1, max_size=5).map(dumps),
    valid_calls.map(dumps),
    json_values.map(dumps),
    st.binary(max_size=200),
    st.sampled_from([b"", b"[]", b"{}", b"[[]]", b"null", b'"x"', b"1e400", b"\xef\xbb\xbf{}"]),
)
ENCODINGS = st.sampled_from(
    [
        "",
        "",
        "",
        "gzip",
        "deflate",
        "gzip-lie",
        "deflate-lie",
        "br",
        "identity",
        "x-zip",
        "gzip, gzip",
    ]
)
CTYPES = st.sampled_from(
    [
        "application/json",
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "text/plain",
        "application/x+json",
        "",
        None,
    ]
)
EXPECTS = st.sampled_from([None, None, None, "100-continue", "200-ok", "", "x" * 50])
PATHS = st.sampled_from(
    [
        "/bsc/{k}",
        "/bsc/{k}",
        "/opbnb/{k}",
        "/bsc",
        "/bsc/",
        "/bsc/{k}/extra",
        "/bsc/{k}?a=1",
        "/bsc/x",
    ]
)
AUTHS = st.sampled_from([None, None, "Bearer {k}", "Bearer wrong", "Basic abc", "Bearer "])
METHODS_HTTP = st.sampled_from(["POST"] * 8 + ["GET", "PUT", "OPTIONS", "DELETE"])
GARBAGE = st.sampled_from(
    [b"", b"", b"GARBAGE / HTTP/1.1\r\n\r\n", b"\x00\xff\r\n\r\n", b"POST /bsc HTTP/9.9\r\n\r\n"]
)


def encode(body: bytes, encoding: str) -> tuple[bytes, str | None]:
    """The body as sent and its ``Content-Encoding`` (``-lie``: plain bytes claiming one)."""
    if encoding == "gzip":
        return gzip.compress(body), "gzip"
    if encoding == "deflate":
        return zlib.compress(body), "deflate"
    if encoding.endswith("-lie"):
        return body, encoding.removesuffix("-lie")
    return body, encoding or None


def chunked(body: bytes, cuts: list[int]) -> bytes:
    """``body`` in chunked framing, cut at ``cuts`` (taken modulo its length)."""
    pieces, at = [], 0
    for cut in [*sorted({c % (len(body) + 1) for c in cuts}), len(body)]:
        if cut > at:
            pieces.append(body[at:cut])
            at = cut
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@dataclass(frozen=True)
class FuzzRequest:
    """One generated HTTP request; ``{k}`` in its path and auth stands for the API key."""

    body: bytes
    encoding: str
    ctype: str | None
    expect: str | None
    path: str
    auth: str | None
    method: str
    chunk_cuts: list[int] | None

    @property
    def content_encoding(self) -> str | None:
        return encode(self.body, self.encoding)[1]

    def wire(self, key: str) -> bytes:
        """The whole request as written to the socket."""
        data, content_encoding = encode(self.body, self.encoding)
        headers: dict[str, str] = {}
        if self.ctype is not None:
            headers["Content-Type"] = self.ctype
        if content_encoding:
            headers["Content-Encoding"] = content_encoding
        if self.expect is not None:
            headers["Expect"] = self.expect
        if self.auth is not None:
            headers["Authorization"] = self.auth.format(k=key)
        if self.chunk_cuts is not None:
            headers["Transfer-Encoding"] = "chunked"
            data = chunked(data, self.chunk_cuts)
        return request(self.path.format(k=key), data, method=self.method, headers=headers)


def http_requests(max_cut: int) -> st.SearchStrategy[FuzzRequest]:
    """A request of every part the fuzzer varies; chunk cuts up to ``max_cut`` bytes in."""
    return st.builds(
        FuzzRequest,
        body=bodies,
        encoding=ENCODINGS,
        ctype=CTYPES,
        expect=EXPECTS,
        path=PATHS,
        auth=AUTHS,
        method=METHODS_HTTP,
        chunk_cuts=st.none() | st.lists(st.integers(0, max_cut), max_size=4),
    )
