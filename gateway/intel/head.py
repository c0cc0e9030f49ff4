"""Per-node heads and one monotonic head per network.

Nodes report their heads (the health probe's batch below, later ``newHeads``
over WebSocket); the tracker keeps each node's latest/safe/finalized block and
derives the network head: its number never goes down (``eth_blockNumber``
answers never decrease, whichever node serves the call), ``safe`` and
``finalized`` never go down either.

The head's *tag* ``(number, hash)`` is what head-dependent cache entries and
coalesced calls are keyed by: a reorg that replaces the tip (same number, new
hash) changes the tag, so nothing cached against the old tip is served again.
A hash commits to the whole chain below it, so an unchanged tag means the
chain every head-keyed answer was read from is still the canonical one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

# The probe: latest, safe and finalized heads in one round trip. BSC nodes
# answer the ``finalized``/``safe`` tags (fast finality); opBNB nodes answer
# them from L1 finality. A node that does not know a tag answers an error for
# that call only, and the tracker then leaves that mark where it was.
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
    for item in answers:
        if type(item) is not dict:
            continue
        block = _block_mark(item.get("result"))
        if block is not None:
            blocks[item.get("id")] = block
    latest = blocks.get(1)
    if latest is None:
        return None
    safe, final = blocks.get(2), blocks.get(3)
    return HeadReport(
        number=latest[0],
        hash=latest[1],
        safe=safe[0] if safe else None,
        finalized=final[0] if final else None,
    )


def _block_mark(block: Any) -> tuple[int, str | None] | None:
    if type(block) is not dict:
        return None
    number = block.get("number")
    if type(number) is not str:
        return None
    try:
        value = int(number, 16)
    except ValueError:
        return None
    digest = block.get("hash")
    return value, digest.lower() if type(digest) is str else None


class HeadTracker:
    """The heads of one network's nodes; ``head`` is the network head snapshot."""

    __slots__ = ("_clock", "_nodes", "_seen", "head", "moves", "reorgs")

    def __init__(self, nodes: Iterable[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._nodes: dict[str, HeadReport | None] = {name: None for name in nodes}
        self._seen: dict[str, float] = {}
        self.head = NetworkHead()
        self.moves = 0  # times the network head's tag changed
        self.reorgs = 0  # ... of which the number stayed and the hash changed

    # -- input ---------------------------------------------------------------
    def observe(self, node: str, report: HeadReport) -> bool:
        """Record ``node``'s report; True when the network head's tag changed."""
        if node not in self._nodes:
            raise KeyError(node)
        self._nodes[node] = report
        self._seen[node] = self._clock()
        old = self.head
        number, digest = old.number, old.hash
        if report.number > number:
            number, digest = report.number, report.hash
        elif report.number == number and report.hash is not None and report.hash != digest:
            # The tip at this height changed (a reorg, or two nodes on rival
            # tips): the newest word wins, and the tag change drops every
            # answer read from the other tip.
            digest = report.hash
        safe = max(old.safe, report.safe if report.safe is not None else -1)
        final = max(old.finalized, report.finalized if report.finalized is not None else -1)
        if (number, digest, safe, final) == (old.number, old.hash, old.safe, old.finalized):
            return False
        self.head = NetworkHead(number, digest, min(safe, number), min(final, number))
        if (number, digest) != (old.number, old.hash):
            self.moves += 1
            if number == old.number:
                self.reorgs += 1
            return True
        return False

    def observe_number(self, node: str, number: int) -> int:
        """A block number a node answered (``eth_blockNumber``); returns what to answer.

        The answer is never below the network head, so a caller served by a
        lagging node still sees numbers that only go up.
        """
        known = self._nodes.get(node)
        if known is None or number > known.number:
            self.observe(node, HeadReport(number))
        elif number < known.number:  # the node went back (restart, resync)
            self._nodes[node] = HeadReport(number)
        return number if number > self.head.number else self.head.number

    def forget(self, node: str) -> None:
        """The node stopped answering: route nothing to it by head until it reports again."""
        self._nodes[node] = None
        self._seen.pop(node, None)

    # -- queries -------------------------------------------------------------
    def node_head(self, node: str) -> int | None:
        report = self._nodes.get(node)
        return None if report is None else report.number

    def lag(self, node: str) -> int | None:
        """Blocks ``node`` is behind the network head (None: unknown)."""
        report = self._nodes.get(node)
        return None if report is None else max(0, self.head.number - report.number)

    def has(self, node: str, block: int) -> bool:
        """Whether ``node`` reported a head at or above ``block``."""
        report = self._nodes.get(node)
        return report is not None and report.number >= block

    def nodes_with(self, block: int) -> list[str]:
        """Nodes known to have ``block``, for routing a call that names it."""
        return [n for n, r in self._nodes.items() if r is not None and r.number >= block]

    def at_head(self, node: str) -> bool:
        """Whether ``node``'s last report is the network head (its answers fit the head tag)."""
        report = self._nodes.get(node)
        head = self.head
        return (
            report is not None
            and report.number >= head.number
            and (report.hash is None or head.hash is None or report.hash == head.hash)
        )

    def resolve(self, ref: int | str | None) -> int | None:
        """A block number for a parsed block param (``methods.block_ref``), or None.

        ``pending`` and hashes have no number; unknown marks resolve to None.
        """
        if type(ref) is int:
            return ref
        head = self.head
        if ref == "latest":
            return head.number if head.known else None
        if ref == "earliest":
            return 0
        if ref == "finalized":
            return head.finalized if head.finalized >= 0 else None
        if ref == "safe":
            return head.safe if head.safe >= 0 else None
        return None

    def age(self, node: str) -> float | None:
        """Seconds since ``node`` last reported."""
        seen = self._seen.get(node)
        return None if seen is None else self._clock() - seen

    def lags(self) -> dict[str, int | None]:
        """Every node's lag, for the per-node head-lag gauge."""
        return {name: self.lag(name) for name in self._nodes}
