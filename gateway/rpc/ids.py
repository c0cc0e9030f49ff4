"""The client's id bytes, exactly as sent ("restored byte for byte").

The parsers give values, not spellings: ``"peer-\\u00e9-0"`` and ``"\\/"``
come back from orjson as the decoded text, which it re-encodes as ``"peer-é-0"``
and ``"/"``. Numbers are already exact (``protocol.parse_body`` keeps every
literal it cannot re-encode as an ``orjson.Fragment``); strings are the one
case left, and only when the body holds a backslash at all. Then this module
finds each call object's top-level ``"id"`` value in the body and the call's
id becomes a Fragment of those bytes, so every answer built by ``orjson``
(node answers, errors, cache hits, batches) writes the client's spelling.

The scan is a tokenizer over strings and structural characters only (a
regular expression that steps over string contents in C), so a 1 MB body
costs a few milliseconds, and the common body (no backslash) costs one
``in`` test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.rpc.protocol import Call

# A JSON string (escapes stepped over) or one structural character.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]')
_ID_KEY = b'"id"'


def _is_id_key(raw: bytes) -> bool:
    if raw == _ID_KEY:
        return True
    if b"\\" not in raw:
        return False
    try:
        return bool(json.loads(raw) == "id")
    except ValueError:
        return False


def raw_ids(body: bytes, is_batch: bool) -> list[bytes | None]:
    """The raw ``id`` value of each top-level call object (last one wins), in order.

    For a single object the list has one entry; for a batch one per array
    element (None where an element has no id or is not an object). Assumes
    ``body`` already parsed as JSON: it only has to find spans, not judge.
    """
    want = 2 if is_batch else 1  # the depth of a call object's members
    out: list[bytes | None] = [None]
    depth = 0
    index = 0
    key: bytes | None = None  # a string token at the member level, maybe a key
    value_at = -1  # where the id value starts, once its key and colon were seen
    for match in _TOKEN.finditer(body):
        tok = match.group()
        char = tok[0]
        if char == 0x22:  # '"'
            if depth == want and value_at < 0:
                key = tok
            continue
        if char == 0x3A:  # ':'
            if depth == want and key is not None and _is_id_key(key):
                value_at = match.end()
            key = None
            continue
        if depth == want and value_at >= 0 and (char == 0x2C or char == 0x7D):  # ',' '}'
            out[index] = body[value_at : match.start()].strip(b" \t\r\n")
            value_at = -1
        if char == 0x7B or char == 0x5B:  # '{' '['
            depth += 1
        elif char == 0x7D or char == 0x5D:  # '}' ']'
            depth -= 1
        elif char == 0x2C and is_batch and depth == 1:
            index += 1
            out.append(None)
        key = None
    return out


def keep_raw_ids(body: bytes, parsed: Any, calls: Sequence[Call], is_batch: bool) -> None:
    """Make each string id whose spelling orjson would change a Fragment of the sent bytes.

    Only strings can differ by now, and only where the body has an escape:
    callers test ``b"\\\\" in body`` first (the hot path's one extra check).
    """
    if not any(type(c.id) is str for c in calls):
        return
    spans = raw_ids(body, is_batch)
    objs = parsed if is_batch else [parsed]
    for i, call in enumerate(calls):
        if type(call.id) is not str or i >= len(spans) or type(objs[i]) is not dict:
            continue
        raw = spans[i]
        if raw is not None and raw != orjson.dumps(call.id):
            call.id = orjson.Fragment(raw)
