"""JSON-RPC 2.0 types: parse, validate, restore ids. No I/O here.

The error catalogue (each error with its JSON-RPC code and HTTP status, and
``error_body``) lives in ``rpc.errors`` and is re-exported here, so callers
keep writing ``rpc.INVALID_REQUEST``.

Ids are echoed exactly as sent. orjson silently turns integers beyond 64
bits into floats, so whenever a parsed id (or anything we must re-encode)
holds a float, the body is parsed again with the stdlib parser keeping every
number literal as an ``orjson.Fragment``; encoding a Fragment writes the
original digits back byte for byte.

It stays whole because parsing and the id restoring are one contract: what
``loads_exact`` keeps of an id is what ``restore_single`` and ``restore_batch``
write back byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

import orjson

# The catalogue, re-exported whole: callers write ``rpc.INVALID_REQUEST``.
from gateway.rpc.errors import *  # noqa: F403
from gateway.rpc.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_METHOD_NAME,
    METHOD_NOT_FOUND,
    RATE_LIMITED,
    UPSTREAM_UNAVAILABLE,
    ErrorKind,
    error_obj,
)
from gateway.rpc.params import canonical_params


class ParseError(Exception):
    """The body is not JSON (or nests deeper than we will follow)."""


def _fragment(literal: str) -> orjson.Fragment:
    return orjson.Fragment(literal)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_exact(body: bytes | str) -> Any:
    """Parse keeping every number as its original literal (slow path).

    Bytes must be UTF-8 (RFC 8259 §8.1): the stdlib would also guess UTF-16
    and UTF-32 and skip a BOM, which orjson, and the nodes, do not.
    """
    try:
        text = body.decode() if isinstance(body, bytes) else body
        return json.loads(
            text, parse_int=_fragment, parse_float=_fragment, parse_constant=_no_constants
        )
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise ParseError(str(exc)) from None


def loads(body: bytes) -> Any:
    """Fast parse with orjson; the caller switches to ``loads_exact`` on floats."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ParseError(str(exc)) from None


@dataclass(slots=True)
class Call:
    """One call of a request, validated; ``error`` set if it must not be forwarded.

    Only what was validated is kept (``method``, ``params``, ``id``): the
    bytes sent to a node are rebuilt from these, so no other member of the
    client's object can ever reach a node.
    """

    method: str = ""
    params: Any = None  # a list or dict; None when the call had none
    id: Any = None
    has_id: bool = False
    error: ErrorKind | None = None
    reason: Any = None  # error.data: a string, or an object (INVALID_PARAMS)
    local: bytes | None = None  # a whole answer the gateway has (a cache hit): not forwarded
    # How it was answered, for X-Gateway-Cache / X-Gateway-Node (rpc/served.py):
    # "hit", "miss" or "coalesced", and the node's name(s) ("" = by the gateway).
    served: str = ""
    node: str = ""
    # The JSON-RPC error code its answer carries (0: a result), set where a batch's
    # answer is made; request insight reads it (``call_code``) instead of the bytes.
    code: int = 0
    # What the key's request log shows beside a failed call (a transaction's hash
    # and route, set by gateway/tx); never params or keys.
    note: str = ""

    @property
    def answered(self) -> bool:
        """Whether this call takes a place in the answer (notifications do not).

        A notification refused for its method or its params is dropped
        silently, as JSON-RPC asks; one that is not even a valid request
        object is answered, since it may not have meant to be a notification.
        """
        error = self.error
        return self.has_id or (
            error is not None
            and error is not METHOD_NOT_FOUND
            and error is not INVALID_PARAMS
            and error is not RATE_LIMITED  # a notification admission refused in a batch
        )


def _valid_id(value: Any) -> bool:
    return value is None or type(value) in (str, int, orjson.Fragment)


def validate_call(obj: Any, methods: Collection[str]) -> Call:
    """Check one request object against JSON-RPC 2.0 and the network's methods."""
    if type(obj) is not dict:
        return Call(error=INVALID_REQUEST, reason="request must be an object")
    has_id = "id" in obj
    id_ = obj.get("id")
    if has_id and not _valid_id(id_):
        return Call(error=INVALID_REQUEST, reason="id must be a string, number or null")
    call = Call(id=id_, has_id=has_id)
    if obj.get("jsonrpc") != "2.0":
        call.error, call.reason = INVALID_REQUEST, 'jsonrpc must be "2.0"'
        return call
    method = obj.get("method")
    if type(method) is not str:
        call.error, call.reason = INVALID_REQUEST, "method must be a string"
        return call
    call.method = method
    params = obj.get("params")
    if params is not None and type(params) is not list and type(params) is not dict:
        call.error, call.reason = INVALID_REQUEST, "params must be an array or object"
        return call
    call.params = params
    if method not in methods:
        call.error = METHOD_NOT_FOUND
        return call
    # Filters and block objects as a Go node reads them; the rebuild is what is forwarded.
    call.params, bad = canonical_params(method, params)
    if bad is not None:
        call.error, call.reason = INVALID_PARAMS, {"reason": bad}
    return call


def has_float(value: Any) -> bool:
    """Whether a parsed value holds a float anywhere (no recursion)."""
    kind = type(value)
    if kind is float:
        return True
    if kind is not list and kind is not dict:
        return False
    stack = [value]
    while stack:
        obj = stack.pop()
        for item in obj.values() if type(obj) is dict else obj:
            t = type(item)
            if t is float:
                return True
            if t is list or t is dict:
                stack.append(item)
    return False


def needs_exact(parsed: Any) -> bool:
    """True when an id or params may have lost digits in orjson.

    orjson reads integers beyond 64 bits (and every fraction or exponent) as
    floats; re-encoding those would not give the client's number back, so
    such a body is parsed again with ``loads_exact``.
    """
    if type(parsed) is dict:
        return type(parsed.get("id")) is float or has_float(parsed.get("params"))
    if type(parsed) is list:
        return any(
            type(o) is dict and (type(o.get("id")) is float or has_float(o.get("params")))
            for o in parsed
        )
    return False


def parse_body(body: bytes) -> Any:
    """The request body as JSON values whose numbers re-encode exactly.

    The fast parser first; the literal-keeping one when numbers would lose
    digits, and as the fallback for valid JSON orjson refuses (``1.5e400``,
    a lone surrogate such as ``"\\ud800"``). A lone surrogate cannot be
    encoded again, so each call keeps only the members a call is made of
    (an unknown member is ignored, as for any other value); one
    left in ``id``, ``method`` or ``params`` is not JSON we can forward:
    ``ParseError``.
    """
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = loads_exact(body)
        try:
            orjson.dumps(parsed)
        except orjson.JSONEncodeError:
            parsed = _call_members(parsed)
            try:
                orjson.dumps(parsed)
            except orjson.JSONEncodeError as exc:
                raise ParseError(str(exc)) from None
        return parsed
    if needs_exact(parsed) or (b"-0" in body and _zero_id(parsed)):
        return loads_exact(body)
    return parsed


_MEMBERS: Final = ("jsonrpc", "id", "method", "params")


def _call_members(parsed: Any) -> Any:
    """Each call object cut to the members validation reads; other batch items to null.

    Only for a body that does not encode again: what is dropped is never read
    (``validate_call`` answers a non-object item "request must be an object"
    whatever it held).
    """

    def cut(obj: Any) -> Any:
        if type(obj) is not dict:
            return None
        return {k: obj[k] for k in _MEMBERS if k in obj}

    if type(parsed) is list:
        return [cut(o) for o in parsed]
    return cut(parsed) if type(parsed) is dict else parsed


def _zero_id(parsed: Any) -> bool:
    """An id orjson read as 0, which may have been written ``-0``."""
    if type(parsed) is dict:
        return type(parsed.get("id")) is int and parsed["id"] == 0
    if type(parsed) is list:
        return any(type(o) is dict and type(o.get("id")) is int and o["id"] == 0 for o in parsed)
    return False


def call_error_obj(call: Call) -> dict[str, Any]:
    assert call.error is not None
    if call.error is METHOD_NOT_FOUND:
        obj = error_obj(METHOD_NOT_FOUND, call.id, call.reason)
        obj["error"]["message"] = not_offered_message(call.method)
        return obj
    return error_obj(call.error, call.id, call.reason)


def not_offered_message(method: str) -> str:
    """geth's -32601 text for ``method``, its name cut at ``MAX_METHOD_NAME`` characters."""
    return METHOD_NOT_FOUND.message % method[:MAX_METHOD_NAME]


# -- canonical forwarding --------------------------------------------------------
_HEAD: Final = b'{"jsonrpc":"2.0","id":'


def encode_call(call: Call, gid: int) -> bytes:
    """The one form a call reaches a node in: validated members, the gateway's id.

    A notification stays a notification (no id). Absent params go as ``[]``
    (geth and BSC refuse a missing array for some methods).
    """
    params = b"[]" if call.params is None else orjson.dumps(call.params)
    method = orjson.dumps(call.method)
    if not call.has_id:
        return b'{"jsonrpc":"2.0","method":%s,"params":%s}' % (method, params)
    return b'%s%d,"method":%s,"params":%s}' % (_HEAD, gid, method, params)


def encode_batch(calls: Collection[Call], first_gid: int) -> bytes:
    """The forwardable calls as one array; call ``i`` carries id ``first_gid + i``."""
    return b"[" + b",".join(encode_call(c, first_gid + i) for i, c in enumerate(calls)) + b"]"


class BadAnswer(Exception):
    """The node's answer is not a JSON-RPC answer to what we sent."""


def _is_answer(obj: Any) -> bool:
    return type(obj) is dict and ("result" in obj or "error" in obj)


def _answers_gid(obj: dict[str, Any], gid: bytes) -> bool:
    ident = obj.get("id")
    if ident is None:  # a node's error about the request it could not read
        return "error" in obj
    return orjson.dumps(ident) == gid


def restore_single(reply: bytes, gid: int, client_id: Any) -> tuple[bytes, bool]:
    """The node's answer with the client's id back in: (body, is an error).

    geth's order (``{"jsonrpc":"2.0","id":N,`` first) is spliced without
    parsing the result, however large; any other shape is parsed in full
    (numbers kept exact) and re-encoded. Raises ``BadAnswer``.
    """
    head = b"%s%d," % (_HEAD, gid)
    if reply.startswith(head) and reply.rstrip().endswith(b"}"):
        n = len(head)
        is_error = reply.startswith(b'"error"', n)
        return b"%s%s,%s" % (_HEAD, orjson.dumps(client_id), reply[n:]), is_error
    try:
        obj = loads_exact(reply)
    except ParseError:
        raise BadAnswer("not JSON") from None
    if not _is_answer(obj) or not _answers_gid(obj, b"%d" % gid):
        raise BadAnswer("not an answer to the call sent")
    obj["jsonrpc"] = "2.0"
    obj["id"] = client_id
    return orjson.dumps(obj), "error" in obj


def restore_batch(
    reply: bytes,
    calls: Collection[Call],
    first_gid: int,
    answered: list[tuple[Call, dict[str, Any]]] | None = None,
    parsed: Any = None,
) -> tuple[bytes, bool]:
    """The batch answer in request order: node answers mapped back by gateway id.

    ``calls`` is the whole request (ours: per-call errors, in place; the
    forwarded ones numbered from ``first_gid`` in order). A call the node did
    not answer gets -32603; a call with a ``local`` answer (not forwarded)
    gets that. ``answered`` collects (call, node answer) of the forwarded
    calls, for the cache. ``parsed``: the reply already parsed (and settled by
    the read lane). Raises ``BadAnswer`` when the reply is not JSON.
    """
    if parsed is not None:
        answers: Any = parsed
    elif not any(c.error is None and c.local is None and c.has_id for c in calls):
        answers = []  # only notifications went out: nothing to wait for
    else:
        try:
            answers = loads_exact(reply)
        except ParseError:
            raise BadAnswer("not JSON") from None
    by_gid: dict[bytes, dict[str, Any]] = {}
    whole: dict[str, Any] | None = None
    if type(answers) is list:
        for item in answers:
            if _is_answer(item) and "id" in item:
                by_gid.setdefault(orjson.dumps(item["id"]), item)
    elif _is_answer(answers) and answers.get("id") is None and "error" in answers:
        whole = answers  # one error about the whole batch (e.g. "batch too large")
    else:
        raise BadAnswer("not an answer to the batch sent")
    out: list[Any] = []
    gid = first_gid
    is_error = False
    for call in calls:
        if call.local is not None:
            out.append(orjson.Fragment(call.local))
            continue
        if call.error is not None:
            if call.answered:
                out.append(call_error_obj(call))
            continue
        mine, gid = gid, gid + 1
        if not call.has_id:
            continue
        item = whole if whole is not None else by_gid.get(b"%d" % mine)
        if item is None:
            out.append(error_obj(UPSTREAM_UNAVAILABLE, call.id, "no answer from node"))
            call.code = UPSTREAM_UNAVAILABLE.code
            is_error = True
            continue
        answer = dict(item)
        answer["jsonrpc"] = "2.0"
        answer["id"] = call.id
        if "error" in answer:
            is_error = True
            call.code = _code_of(answer["error"])
        out.append(answer)
        if answered is not None and whole is None:
            answered.append((call, item))
    return orjson.dumps(out), is_error


def _code_of(error: Any) -> int:
    """A node's error object's code (0 for one without an integer code)."""
    if type(error) is dict and type(error.get("code")) is int:
        return int(error["code"])
    return 0


def call_code(call: Call) -> int:
    """The code of ``call``'s place in a batch answer (0: a result, or no place at all)."""
    if not call.answered:
        return 0
    if call.code:
        return call.code
    return call.error.code if call.error is not None else 0


def json_too_deep(parsed: Any, limit: int) -> bool:
    """Whether ``parsed`` nests containers deeper than ``limit`` (no recursion)."""
    level = [parsed]
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper: list[Any] = []
        add = deeper.append
        for obj in level:
            kind = type(obj)
            if kind is not dict and kind is not list:
                continue
            for value in obj.values() if kind is dict else obj:
                if type(value) is dict or type(value) is list:
                    add(value)
        level = deeper
        depth += 1
    return False
