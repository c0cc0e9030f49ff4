"""One node's record and the agreement over them: the counting half of the head rule.

``NodeRecord`` is what one node in service has said (claims, the hashes it
confirmed and their parents, its head, its marks); ``agreed`` finds the
highest block a quorum of them confirmed with one hash, and whether two of
them contradict each other above it. ``gateway.intel.head.HeadTracker``
feeds the records and applies the rest of the rule (who is current, the
solo lead, lies, marks).
"""

from __future__ import annotations

from typing import Final

CLAIMS_KEPT: Final = 64  # pushed header hashes remembered per node


class NodeRecord:
    """What one node in service has said: claims, its confirmed chain, its marks."""

    __slots__ = (
        "at",
        "chain",
        "claimed",
        "claims",
        "finalized",
        "hash",
        "lead",
        "number",
        "safe",
        "stamp",
        "strikes",
    )

    def __init__(self) -> None:
        self.claims: dict[int, str | None] = {}  # pushed header hash by number
        self.claimed = -1  # highest number claimed
        self.number = -1  # confirmed head (-1: none yet)
        self.hash: str | None = None
        self.at = 0.0  # when it was confirmed
        self.stamp: int | None = None  # its confirmed head's block timestamp
        self.lead: float | None = None  # that stamp less the wall clock when it was confirmed
        # Hashes it confirmed (and their parents), by number: what agreement reads.
        self.chain: dict[int, str] = {}
        self.safe = -1
        self.finalized = -1
        self.strikes = 0  # headers contradicted by its own answers, in a row

    def keep(self, number: int, digest: str) -> None:
        self.chain[number] = digest
        if len(self.chain) > CLAIMS_KEPT:
            del self.chain[min(self.chain)]

    def says(self, number: int) -> str | None:
        """The hash this node confirmed at ``number`` (None: it has not said)."""
        return self.hash if number == self.number else self.chain.get(number)


def agreed(nodes: list[NodeRecord], quorum: int) -> tuple[int, str | None, bool]:
    """The highest (number, hash) ``quorum`` of ``nodes`` confirmed, and whether
    two of them confirmed different hashes above it (a split).

    Only a hash a node confirmed (or named as a confirmed block's parent)
    is its vote: a node that jumped past a number has not said it, and
    counting its silence would let a fork borrow its vote.
    """
    if quorum == 1 and len(nodes) == 1:
        only = nodes[0]
        return only.number, only.hash, False
    wanted: set[tuple[int, str]] = set()
    for seen in nodes:
        wanted.update(seen.chain.items())
        if seen.hash is not None:
            wanted.add((seen.number, seen.hash))
    split = False
    for number, digest in sorted(wanted, key=lambda item: item[0], reverse=True):
        votes = 0
        for seen in nodes:
            said = seen.says(number)
            if said == digest:
                votes += 1
            elif said is not None:
                split = True
        if votes >= quorum:
            return number, digest, split
    return -1, None, split


def when_confirmed(seen: NodeRecord) -> float:
    return seen.at
