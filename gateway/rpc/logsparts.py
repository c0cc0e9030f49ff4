"""The small parts of an ``eth_getLogs`` split (``rpc.logsplit``) that hold no state.

How a node's refusal of a range reads (``refusal_text``) and what it
teaches (``learn``); and a split answer's parts, each a chunk's JSON list
of logs in block order: merged without re-encoding (``merge``), the
blocks named above the finalized one (``named_above``), cut before a block
(``before``).
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from gateway.upstream.pool import Node

# A node's words for "this range (or its result) is too big for me".
_REFUSAL: Final = re.compile(
    r"exceeds? (?:the )?max(?:imum)? block range|block range (?:is )?too (?:large|wide|big)"
    r"|range (?:is )?too (?:large|wide)|more than \d+ results|too many (?:blocks|logs|results)"
    r"|response size (?:exceeded|too large)|max(?:imum)? results"
    r"|limited to (?:a )?[\d,]+[ -](?:block )?range|block range greater than",
    re.I,
)
# The limit a refusal names: "exceed maximum block range: 5000", "max block range 1000",
# "limited to a 5 block range", "limited to a 10,000 range".
_LIMIT: Final = re.compile(
    r"block range[^0-9]{0,24}(\d[\d,]{0,12})|limited to (?:a )?(\d[\d,]{0,12})[ -]", re.I
)


def refusal_text(reply: bytes) -> str | None:
    """The error message of a node's answer refusing a log range as too wide, else None."""
    if len(reply) > 8192 or b'"error"' not in reply:
        return None
    try:
        obj = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return None
    error = obj.get("error") if type(obj) is dict else None
    if type(error) is not dict:
        return None
    text = " ".join(str(error.get(k, "")) for k in ("message", "data"))
    return text if _REFUSAL.search(text) else None


def learn(node: Node, span: int, text: str) -> None:
    """Lower ``node``'s range limit after it refused ``span`` blocks with ``text``."""
    named = _LIMIT.search(text)
    limit = int((named.group(1) or named.group(2)).replace(",", "")) if named else 0
    if not 0 < limit < span:
        limit = max(1, span // 2)
    if node.logs_limit <= 0 or limit < node.logs_limit:
        node.logs_limit = limit


def named_above(parts: list[bytes], final: int) -> dict[int, str]:
    """Block number to hash of the logs above block ``final`` (only the tail is parsed)."""
    named: dict[int, str] = {}
    for part in reversed(parts):
        logs = orjson.loads(part) if len(part) > 2 else []
        if not logs:
            continue
        for log in logs:
            number = log.get("blockNumber") if type(log) is dict else None
            if type(number) is str and int(number, 16) > final:
                named[int(number, 16)] = str(log.get("blockHash"))
        first = logs[0].get("blockNumber") if type(logs[0]) is dict else None
        if type(first) is str and int(first, 16) <= final:
            break
    return named


def before(parts: list[bytes], first: int) -> list[bytes]:
    """``parts`` without the logs of block ``first`` and later."""
    kept: list[bytes] = []
    for part in parts:
        logs = orjson.loads(part) if len(part) > 2 else []
        early = [
            log
            for log in logs
            if type(log) is dict
            and type(log.get("blockNumber")) is str
            and int(log["blockNumber"], 16) < first
        ]
        if len(early) == len(logs):
            kept.append(part)
        else:
            kept.append(orjson.dumps(early))
            break
    return kept


def merge(parts: list[bytes]) -> bytes:
    """JSON lists (each a chunk's logs, in block order) as one list, without re-encoding."""
    inner = [p.strip()[1:-1].strip() for p in parts]
    return b"[" + b",".join(i for i in inner if i) + b"]"
