"""Ids byte for byte on every transport.

A property test over arbitrary JSON ids, spelled every way JSON allows
(escapes in either case, surrogate pairs, ``\\/``, exponents, ``-0``,
``1.0``, integers past 64 bits): the answer carries exactly the bytes the
client sent, over HTTP and over a WebSocket, single and batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.rpc.ids import raw_ids
from tests.helpers.config import MakeConfig
from tests.helpers.served import Served, served

_SHORT = {'"': b'\\"', "\\": b"\\\\", "/": b"\\/", "\b": b"\\b", "\f": b"\\f", "\n": b"\\n"}
_SHORT |= {"\r": b"\\r", "\t": b"\\t"}


@st.composite
def _char(draw: st.DrawFn) -> bytes:
    """One character, as one of the spellings JSON allows for it."""
    ch = draw(st.characters(exclude_categories=["Cs"]))
    code = ord(ch)
    forms: list[bytes] = []
    if code >= 0x20 and ch not in '"\\':
        forms.append(ch.encode())
    if ch in _SHORT:
        forms.append(_SHORT[ch])
    if code < 0x10000:
        forms.append(b"\\u%04x" % code)
        forms.append(b"\\u%04X" % code)
    else:
        high = 0xD800 + ((code - 0x10000) >> 10)
        low = 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(b"\\u%04x\\u%04x" % (high, low))
    return draw(st.sampled_from(forms))


_strings = st.lists(_char(), max_size=12).map(lambda parts: b'"' + b"".join(parts) + b'"')
_numbers = st.one_of(
    st.from_regex(rb"\A-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,5})?([eE][+-]?[0-9]{1,3})?\Z"),
    st.sampled_from([b"-0", b"1.0", b"1e2", b"1e400", b"-1e400", b"1180591620717411303424"]),
)
ids = st.one_of(_strings, _numbers, st.just(b"null"))


def _call(raw_id: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"eth_chainId"}'


def _answer(raw_id: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"result":"0x38"}'


@pytest.fixture
async def gateway(make_config: MakeConfig) -> AsyncIterator[Served]:
    cfg = make_config({"plans": {"free": {"rate": 10_000, "burst": 10_000}}})
    async with served(cfg) as srv:
        yield srv


async def _both(srv: Served, key: str, body: bytes) -> tuple[bytes, bytes]:
    url = f"{srv.url}/bsc/{key}"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
            over_http = await r.read()
        async with http.ws_connect("ws" + url[4:]) as ws:
            await ws.send_bytes(body)
            msg = await ws.receive(timeout=10)
            over_ws = msg.data.encode() if isinstance(msg.data, str) else msg.data
    return over_http, over_ws


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(ids, min_size=1, max_size=3), single=st.booleans())
async def test_any_id_comes_back_as_sent(
    gateway: Served, api_key: str, batch: list[bytes], single: bool
) -> None:
    if single:
        body, want = _call(batch[0]), _answer(batch[0])
    else:
        body = b"[" + b",".join(_call(i) for i in batch) + b"]"
        want = b"[" + b",".join(_answer(i) for i in batch) + b"]"
    over_http, over_ws = await _both(gateway, api_key, body)
    assert over_http == want
    assert over_ws == want


@pytest.mark.parametrize(
    ("body", "batch", "want"),
    [
        (b'{"id" : "a\\/b" , "x":{"id":1}}', False, [b'"a\\/b"']),
        (b'{"p":["id",{"id":2}],"\\u0069d":"\\u00e9"}', False, [b'"\\u00e9"']),
        (b'{"id":"x","id":"\\"y"}', False, [b'"\\"y"']),  # the last one wins, as parsed
        (b'[{"id":"\\/"}, 5, {"a":"}{,:\\"id"}, {"id":-0}]', True, [b'"\\/"', None, None, b"-0"]),
    ],
)
def test_the_scanner_finds_each_call_objects_own_id(
    body: bytes, batch: bool, want: list[bytes | None]
) -> None:
    assert raw_ids(body, batch) == want
