"""How a mock node reads a request and writes an answer: HTTP/1.1 framing of the
answer, JSON read with exact number literals, geth's (Go ``encoding/json``) way of
filling its message struct, and a JavaScript node's way of echoing an id.
"""

from __future__ import annotations

import decimal
import json
from typing import Any, Final

import orjson

_REASONS: Final = {
    200: b"OK",
    204: b"No Content",
    400: b"Bad Request",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
}


def http_answer(status: int, body: bytes, *, close: bool, extra: bytes = b"") -> bytes:
    """Serialise one HTTP/1.1 response; 204 carries no body and no length."""
    head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))
    if status != 204:
        head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    if close:
        head += b"Connection: close\r\n"
    return head + extra + b"\r\n" + (body if status != 204 else b"")


def error_obj(cid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": cid, "error": {"code": code, "message": message}}


def loads(body: bytes) -> Any:
    """Parse JSON, keeping number literals exact when orjson cannot."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return loads_exact(body)


def loads_exact(body: bytes) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(
        body, parse_int=orjson.Fragment, parse_float=orjson.Fragment, parse_constant=reject
    )


class _GoObject(dict[str, Any]):
    """A JSON object that also remembers its members in order, duplicates included."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


_GO_FIELDS: Final = {"jsonrpc": str, "id": object, "method": str, "params": object}


def go_decode(body: bytes) -> Any:
    """Read a request the way Go's ``encoding/json`` fills geth's message struct.

    Each member whose name equals a field's name under Unicode case folding
    sets that field, later members overwriting earlier ones; a ``null`` for a
    string field leaves it as it was; every other member is ignored.
    Numbers keep their literal (``json.RawMessage``).
    """

    def reject(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    msg = json.loads(
        body,
        parse_int=orjson.Fragment,
        parse_float=orjson.Fragment,
        parse_constant=reject,
        object_pairs_hook=_GoObject,
    )
    if isinstance(msg, list):
        return [_go_struct(item) for item in msg]
    return _go_struct(msg)


def _go_struct(obj: Any) -> Any:
    if not isinstance(obj, _GoObject):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.pairs:
        name = key.casefold()
        kind = _GO_FIELDS.get(name)
        if kind is None or (value is None and kind is str):
            continue
        out[name] = value
    return out


def js_id(cid: Any) -> Any:
    """An id as a JavaScript node writes it back: through a float64."""
    if type(cid) is not int and type(cid) is not float:
        return cid
    f = float(cid)
    if not f.is_integer():
        return f
    digits = format(decimal.Decimal(repr(f)), "f").partition(".")[0]
    return orjson.Fragment(digits)


GENESIS_TS: Final = 1_598_671_449  # BSC genesis; any fixed value would do
BLOCK_INTERVAL_S: Final = 3  # timestamp spacing of canned blocks


def canned_block(
    number: int, block_hash: str, parent_hash: str, transactions: list[Any]
) -> dict[str, Any]:
    """A block header as the mock nodes answer it (the HTTP one and the WebSocket one)."""
    return {
        "number": hex(number),
        "hash": block_hash,
        "parentHash": parent_hash,
        "timestamp": hex(GENESIS_TS + number * BLOCK_INTERVAL_S),
        "miner": "0x" + "00" * 20,
        "gasLimit": hex(140_000_000),
        "gasUsed": "0x0",
        "baseFeePerGas": "0x0",
        "difficulty": "0x2",
        "extraData": "0x",
        "size": "0x260",
        "transactions": transactions,
        "uncles": [],
    }
