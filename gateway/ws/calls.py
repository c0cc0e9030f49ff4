"""JSON-RPC over the socket, without I/O: parse a frame, check subscribe params,
build the canonical upstream body and put the client's ids back.

What a node receives is built here from validated members only
(``jsonrpc``, ``method``, ``params`` and an id the gateway picks), as on
HTTP (SPEC §3): no other member of the client's object travels.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.rpc import protocol as rpc

INVALID_PARAMS: Final = rpc.ErrorKind(-32602, "Invalid params", 200)
SUBSCRIBE = "eth_subscribe"
UNSUBSCRIBE = "eth_unsubscribe"
LOCAL_METHODS: Final = frozenset({SUBSCRIBE, UNSUBSCRIBE})
KINDS: Final = frozenset({"newHeads", "logs", "newPendingTransactions"})

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_TOPIC = re.compile(r"0x[0-9a-fA-F]{64}\Z")


@dataclass(slots=True)
class Frame:
    """One parsed frame: its calls, or a request-level error."""

    calls: list[rpc.Call]
    is_batch: bool
    error: tuple[rpc.ErrorKind, str | None] | None = None


def parse_frame(data: bytes, methods: Collection[str], max_batch: int, max_depth: int) -> Frame:
    try:
        parsed: Any = rpc.loads(data)
        if rpc.has_float(parsed):
            parsed = rpc.loads_exact(data)
    except rpc.ParseError:
        return Frame([], False, (rpc.PARSE_ERROR, None))
    if data.count(b"[") + data.count(b"{") > max_depth and rpc.json_too_deep(parsed, max_depth):
        return Frame([], False, (rpc.INVALID_REQUEST, f"JSON nested deeper than {max_depth}"))
    if type(parsed) is list:
        if not parsed:
            return Frame([], True, (rpc.INVALID_REQUEST, "empty batch"))
        if len(parsed) > max_batch:
            reason = f"batch of {len(parsed)} calls exceeds the limit of {max_batch}"
            return Frame([], True, (rpc.INVALID_REQUEST, reason))
        return Frame([rpc.validate_call(obj, methods) for obj in parsed], True)
    return Frame([rpc.validate_call(parsed, methods)], False)


def subscribe_params(params: Any) -> tuple[str, list[Any], bytes] | str:
    """(kind, params for the node, canonical filter) or the reason it is refused."""
    if type(params) is not list or not params or type(params[0]) is not str:
        return 'params must be ["newHeads" | "logs" | "newPendingTransactions", filter?]'
    kind = params[0]
    if kind not in KINDS:
        return f"subscription {kind!r} is not offered"
    rest = params[1:]
    if kind != "logs":
        if rest and rest != [False]:
            return f"{kind} takes no options"
        return kind, [kind], b""
    if len(rest) > 1:
        return "logs takes one filter object"
    flt = rest[0] if rest else {}
    if type(flt) is not dict:
        return "the logs filter must be an object"
    unknown = set(flt) - {"address", "topics"}
    if unknown:
        return f"the logs filter takes address and topics only, not {sorted(unknown)[0]!r}"
    out: dict[str, Any] = {}
    address = flt.get("address")
    if address is not None:
        addrs = [address] if type(address) is str else address
        if type(addrs) is not list or not all(type(a) is str and _ADDRESS.match(a) for a in addrs):
            return "address must be a 0x address or a list of them"
        if len(addrs) > 1000:
            return "at most 1000 addresses"
        norm = sorted({a.lower() for a in addrs})
        if norm:
            out["address"] = norm[0] if type(address) is str else norm
    topics = flt.get("topics")
    if topics is not None:
        if type(topics) is not list or len(topics) > 4:
            return "topics must be a list of at most 4 positions"
        tnorm: list[Any] = []
        for pos in topics:
            if pos is None:
                tnorm.append(None)
            elif type(pos) is str and _TOPIC.match(pos):
                tnorm.append(pos.lower())
            elif type(pos) is list and all(type(t) is str and _TOPIC.match(t) for t in pos):
                tnorm.append(sorted({t.lower() for t in pos}) or None)
            else:
                return "each topic must be null, a 32-byte hex string or a list of them"
        while tnorm and tnorm[-1] is None:
            tnorm.pop()
        if tnorm:
            out["topics"] = tnorm
    canon = orjson.dumps(out, option=orjson.OPT_SORT_KEYS)
    return kind, [kind, out], canon


def new_subscription_id() -> str:
    """A client's subscription id: 128 random bits in hex, like geth's."""
    return "0x" + secrets.token_hex(16)


def upstream_body(calls: Sequence[rpc.Call], is_batch: bool) -> bytes:
    """The canonical request: gateway ids 0..n-1, validated members only."""
    objs = []
    for i, call in enumerate(calls):
        params = call.params
        objs.append(
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": call.method,
                "params": [] if params is None else params,
            }
        )
    return orjson.dumps(objs if is_batch else objs[0])


def restore(reply: bytes, calls: Sequence[rpc.Call]) -> list[Any] | None:
    """The node's answers in call order, client ids back; None if not JSON-RPC.

    Numbers a float would round (big integers) are re-read exactly first.
    """
    try:
        fast = rpc.loads(reply)
        # Ids are ours (small ints) and read from the fast parse; a float
        # elsewhere means a big number orjson rounded: take the values exactly.
        exact = rpc.loads_exact(reply) if rpc.has_float(fast) else fast
    except rpc.ParseError:
        return None
    if type(fast) is dict:
        fast, exact = [fast], [exact]
    if type(fast) is not list:
        return None
    by_id: dict[int, Any] = {}
    for item, value in zip(fast, exact, strict=True):
        if type(item) is dict and type(item.get("id")) is int:
            by_id[item["id"]] = value
    out: list[Any] = []
    for i, call in enumerate(calls):
        item = by_id.get(i)
        if item is None or ("result" not in item and "error" not in item):
            out.append(rpc.error_obj(rpc.UPSTREAM_UNAVAILABLE, call.id, "no answer from node"))
            continue
        if "error" in item:
            out.append({"jsonrpc": "2.0", "id": call.id, "error": item["error"]})
        else:
            out.append({"jsonrpc": "2.0", "id": call.id, "result": item["result"]})
    return out
