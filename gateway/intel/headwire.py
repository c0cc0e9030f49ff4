"""What a node says about its chain, read: the probe, block marks, report and head values.

The values and parsers the head tracker (``gateway.intel.head``) is fed
with and answers in, kept apart from its rule so the rule reads whole:
``PROBE_BODY`` and ``parse_probe`` (latest, safe and finalized in one round
trip), ``block_mark``/``block_stamp``/``block_parent`` (a block object's
number and hash, timestamp, parent hash), ``HeadReport`` (one node's word),
``NetworkHead`` (the agreed head, replaced whole when it moves) and
``HeadRules`` (the ``[head]`` settings it applies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

# The probe: latest, safe and finalized heads in one round trip. A node that
# does not know a tag answers an error for that call only.
PROBE_BODY: Final = (
    b'[{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["latest",false]},'
    b'{"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["safe",false]},'
    b'{"jsonrpc":"2.0","id":3,"method":"eth_getBlockByNumber","params":["finalized",false]}]'
)


@dataclass(frozen=True, slots=True)
class HeadReport:
    """What one node said about its chain; ``None`` = not reported."""

    number: int
    hash: str | None = None
    safe: int | None = None
    finalized: int | None = None
    stamp: int | None = None  # the latest block's timestamp (seconds)
    parent: str | None = None  # the latest block's parentHash


@dataclass(frozen=True, slots=True)
class NetworkHead:
    """A snapshot of the network head; replaced, never mutated, when it moves."""

    number: int = 0
    hash: str | None = None
    safe: int = -1  # -1: not known yet, so nothing counts as safe ...
    finalized: int = -1  # ... or final

    @property
    def tag(self) -> tuple[int, str | None]:
        """The key of everything that is only true at this head."""
        return (self.number, self.hash)

    @property
    def known(self) -> bool:
        return self.number > 0


@dataclass(frozen=True, slots=True)
class HeadRules:
    """How the head is agreed and when a node's word takes it out (``[head]``).

    No speed, lead or lag rule: a node catching up after a stall, or a dev
    chain mining a burst, runs faster than any block time and is right; a
    node behind is only left out of the head.
    """

    stale_s: float = 0.0  # 0: every node with a confirmed head is current
    quorum: int = 0  # 0: 2 where two or more nodes are current, else 1
    solo_lead: int = 1
    clock_skew_s: float = 2.0
    max_mismatches: int = 3


def parse_probe(reply: bytes) -> HeadReport | None:
    """The node's heads from its answer to ``PROBE_BODY``; None if it has no usable latest."""
    try:
        answers = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return None
    if type(answers) is dict:  # a node that refuses batches answers one error object
        answers = [answers]
    if type(answers) is not list:
        return None
    blocks: dict[Any, tuple[int, str | None]] = {}
    top: Any = None
    for item in answers:
        if type(item) is not dict:
            continue
        block = block_mark(item.get("result"))
        if block is not None:
            blocks[item.get("id")] = block
            if item.get("id") == 1:
                top = item.get("result")
    latest = blocks.get(1)
    if latest is None:
        return None
    safe, final = blocks.get(2), blocks.get(3)
    return HeadReport(
        number=latest[0],
        hash=latest[1],
        safe=safe[0] if safe else None,
        finalized=final[0] if final else None,
        stamp=block_stamp(top),
        parent=block_parent(top),
    )


def block_mark(block: Any) -> tuple[int, str | None] | None:
    """(number, hash) of a block object (``number``/``hash``), None for anything else."""
    if type(block) is not dict:
        return None
    number = block.get("number")
    if type(number) is not str:
        return None
    try:
        value = int(number, 16)
    except ValueError:
        return None
    if not 0 <= value < 1 << 63:
        return None
    digest = block.get("hash")
    return value, digest.lower() if type(digest) is str else None


def block_stamp(block: Any) -> int | None:
    """A block object's ``timestamp`` in seconds, None where it has none."""
    value = block.get("timestamp") if type(block) is dict else None
    if type(value) is not str:
        return None
    try:
        stamp = int(value, 16)
    except ValueError:
        return None
    return stamp if 0 <= stamp < 1 << 63 else None


def block_parent(block: Any) -> str | None:
    """A block object's ``parentHash``, lower case, None where it has none."""
    value = block.get("parentHash") if type(block) is dict else None
    return value.lower() if type(value) is str else None
