"""``rpc.relay``: every answer layout relayed in pieces with the client's id, or refused."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest

from gateway.rpc import protocol as rpc
from gateway.rpc.relay import Relay
from gateway.upstream.errors import UpstreamError
from gateway.upstream.nodeclient import NodeStream


class _Stream:
    """A node answer arriving in fixed pieces (the NodeStream surface Relay uses)."""

    def __init__(self, data: bytes, piece: int = 7, length: bool = True) -> None:
        self._pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.length = len(data) if length else None
        self.closed = False

    async def read(self) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""

    def close(self) -> None:
        self.closed = True


async def _relay(data: bytes, client_id: Any, limit: int = 1 << 20, **kw: Any) -> bytes:
    relay = Relay(cast(NodeStream, _Stream(data, **kw)), 5, client_id, limit)
    out = await relay.start()
    async for chunk in relay.rest():
        out += chunk
    if relay.length is not None:
        assert relay.length == len(out)
    return out


RESULT = b'"0x' + b"ab" * 2000 + b'"'


@pytest.mark.parametrize(
    "answer",
    [
        b'{"jsonrpc":"2.0","id":5,"result":' + RESULT + b"}",  # geth
        b'{"jsonrpc": "2.0", "id": 5, "result": ' + RESULT + b"}",  # spaced
        b'{ "id" : 5 ,\n "jsonrpc":"2.0", "result":' + RESULT + b" }",  # another order
        b'{"jsonrpc":"2.0","result":' + RESULT + b',"id":5}',  # id last (Nethermind)
        b'{"result":' + RESULT + b', "id": 5, "jsonrpc": "2.0"}\n',  # id last, then jsonrpc
    ],
)
async def test_each_layout_is_relayed_with_the_client_id(answer: bytes) -> None:
    client_id = orjson.Fragment(b'"\\u00e9"')
    out = await _relay(answer, client_id)
    assert out.startswith(b'{"jsonrpc":"2.0","id":"\\u00e9","result":')
    assert orjson.loads(out) == {"jsonrpc": "2.0", "id": "\u00e9", "result": orjson.loads(RESULT)}


async def test_an_error_answer_is_flagged() -> None:
    relay = Relay(
        cast(NodeStream, _Stream(b'{"jsonrpc": "2.0", "id": 5, "error": {"code": 3}}')), 5, 1, 99
    )
    await relay.start()
    assert relay.is_error


async def test_an_id_last_answer_for_another_call_is_refused_at_its_end() -> None:
    with pytest.raises(rpc.BadAnswer):
        await _relay(b'{"jsonrpc":"2.0","result":' + RESULT + b',"id":6}', 1)


async def test_another_layout_is_read_whole_only_up_to_the_bound() -> None:
    odd = b'{"x":1,"jsonrpc":"2.0","id":5,"result":' + RESULT + b"}"
    out = await _relay(odd, 1, limit=1 << 20)
    assert orjson.loads(out)["id"] == 1
    with pytest.raises(UpstreamError) as err:
        await _relay(odd, 1, limit=1000)
    assert err.value.too_large
