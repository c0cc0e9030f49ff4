"""Which answers may be cached, and for how long: ``classify`` (pure, no I/O).

The rules, and why each is safe:

- ``eth_chainId``, ``net_version``: fixed for the chain's life -> FOREVER.
- Anything about a block at or below the finalized block (by number, or a
  range of logs): finality means it can no longer change -> FOREVER.
- Anything read at ``latest``/``safe``/``finalized`` or at a block above the
  finalized one: true for the current chain only -> UNTIL_HEAD_MOVES, keyed by
  the head's ``(number, hash)``; a hash commits to every block below it, so a
  reorg at any depth changes the key.
- Blocks, transactions and receipts by hash: the block they sit in is only
  known from the answer -> IF_FINAL(None): FOREVER once the answer's block
  number is final, otherwise under the head key.
- ``pending``, writes, anything not a known read -> NEVER. Errors and ``null``
  answers are never stored (see ``ResponseCache.put``).

Filters and EIP-1898 block objects arrive as ``gateway.rpc.params`` rebuilt
them (canonical names, read as a Go node reads them), which is also what a
node receives: the block classified here is the block the node reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

from gateway.intel.head import NetworkHead
from gateway.intel.methods import (
    BLOCK_BY_NUMBER,
    BY_HASH,
    CONSTANT,
    STATE_AT,
    block_ref,
    param,
)


class Kind(enum.Enum):
    NEVER = "never"
    FOREVER = "forever"
    UNTIL_HEAD_MOVES = "until_head_moves"
    IF_FINAL = "if_final"


@dataclass(frozen=True, slots=True)
class Policy:
    """How one call may be cached.

    ``block``: for IF_FINAL, the block the answer is about (None: read it from
    the answer); for the other kinds, the highest block number the call names
    (-1: none), which routing uses to pick a node that has it.
    """

    kind: Kind
    block: int | None = -1


NEVER: Final = Policy(Kind.NEVER)
FOREVER: Final = Policy(Kind.FOREVER)
HEAD: Final = Policy(Kind.UNTIL_HEAD_MOVES)
BY_ANSWER: Final = Policy(Kind.IF_FINAL, None)


def classify(method: str, params: Any, head: NetworkHead) -> Policy:
    """The cache policy of one call at the network head ``head``."""
    if method in CONSTANT:
        return FOREVER
    if method == "eth_blockNumber":
        return HEAD
    index = STATE_AT.get(method)
    if index is not None:
        return _at_block(param(params, index, "latest"), head)
    if method in BLOCK_BY_NUMBER:
        return _at_block(param(params, 0), head)
    if method in BY_HASH:
        return BY_ANSWER if type(param(params, 0)) is str else NEVER
    if method == "eth_getLogs":
        return _logs(param(params, 0), head)
    return NEVER


def _at_block(value: Any, head: NetworkHead) -> Policy:
    ref = block_ref(value)
    if ref is None or ref == "pending":
        return NEVER
    if ref == "hash":
        return HEAD  # state at a block hash: true while that block is canonical
    if type(ref) is int:
        return _number(ref, head)
    if ref == "earliest":
        return _number(0, head)
    if ref == "latest" and head.known:
        # Routed as a call naming the head: only a node on the agreed chain and
        # current gets it, never one that is behind or ahead on its own word.
        return Policy(Kind.UNTIL_HEAD_MOVES, head.number)
    return HEAD  # safe, finalized: move with the head


def _number(block: int, head: NetworkHead) -> Policy:
    if block > head.number:
        # Not mined as far as we know (nodes answer null or an error); the block
        # still steers routing to a node that may have it.
        return Policy(Kind.NEVER, block)
    if block <= head.finalized:
        return Policy(Kind.IF_FINAL, block)
    return Policy(Kind.UNTIL_HEAD_MOVES, block)


def _logs(spec: Any, head: NetworkHead) -> Policy:
    if type(spec) is not dict:
        return NEVER
    if "blockHash" in spec:
        return BY_ANSWER if type(spec["blockHash"]) is str else NEVER
    high = -1
    moves = False
    for name in ("fromBlock", "toBlock"):
        ref = block_ref(spec.get(name, "latest"))
        if ref is None or ref == "pending" or ref == "hash":
            return NEVER
        if type(ref) is not int:
            if ref != "earliest":
                moves = True  # a tag other than earliest moves with the head
                continue
            ref = 0
        high = max(high, ref)
    if moves:
        # The numbered end still steers routing: a node below it would
        # answer an empty (wrong) list.
        return Policy(Kind.UNTIL_HEAD_MOVES, high)
    return _number(high, head)
