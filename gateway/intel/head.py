"""One network's head, confirmed: no node moves the chain alone.

Every source feeds one object (``HeadTracker``) with one rule. A node's
*claim* (a ``newHeads`` header, an ``eth_blockNumber`` answer) moves
nothing; a block counts only once that node's HTTP answer for that number
carries a hash (``vouch``: the probe's latest block, a confirmation fetch,
a block, receipt or log a client read returned), and that hash matches
any header the node pushed for the number. A node whose headers its own
answers keep contradicting (``max_mismatches`` in a row), or whose head is
more than ``max_lead`` blocks ahead of every other node in service, is
*ejected*: ``on_eject`` takes it out of rotation and everything it said
is forgotten at once. Whenever a node leaves, the network head is
recomputed from the nodes still in service, so a spoofed number or hash
never outlives its node (it can drop; ``served`` keeps the
``eth_blockNumber`` answers monotonic).

Safe and finalized marks: a node's mark above its own confirmed head, or
below its previous mark, is ignored; the network's mark is the highest one
two nodes in service have both reached (with a single configured node, its
own), and never goes back. So nothing is cached as final on one node's
word.

The head's *tag* ``(number, hash)`` keys head-dependent cache entries and
coalesced calls: a reorg that replaces the tip changes the tag, and a hash
commits to the whole chain below it.

It stays whole because the rule is one contract: every feeder (probe,
``newHeads``, answers) goes through the same checks, the same ejection and
the same recompute, and splitting them would let one path skip a check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
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
_CLAIMS_KEPT: Final = 64  # pushed header hashes remembered per node


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


@dataclass(frozen=True, slots=True)
class HeadRules:
    """When a node's word takes it out of rotation (``[head]``).

    No speed rule: a node catching up after a stall, or a dev chain mining a
    burst, runs faster than any block time and is right.
    """

    max_lead: int = 64
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
    for item in answers:
        if type(item) is not dict:
            continue
        block = block_mark(item.get("result"))
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


class _Node:
    """What one node in service has said: claims, its confirmed head, its marks."""

    __slots__ = (
        "at",
        "claimed",
        "claims",
        "finalized",
        "hash",
        "number",
        "safe",
        "strikes",
    )

    def __init__(self) -> None:
        self.claims: dict[int, str | None] = {}  # pushed header hash by number
        self.claimed = -1  # highest number claimed
        self.number = -1  # confirmed head (-1: none yet)
        self.hash: str | None = None
        self.at = 0.0  # when it was confirmed
        self.safe = -1
        self.finalized = -1
        self.strikes = 0  # headers contradicted by its own answers, in a row


class HeadTracker:
    """The heads of one network's nodes; ``head`` is the confirmed network head."""

    __slots__ = (
        "_clock",
        "_known",
        "_live",
        "head",
        "moves",
        "on_eject",
        "reorgs",
        "rules",
        "served",
    )

    def __init__(
        self,
        nodes: Iterable[str],
        clock: Callable[[], float] = time.monotonic,
        rules: HeadRules | None = None,
    ) -> None:
        self._clock = clock
        self.rules = rules or HeadRules()
        self._known = frozenset(nodes)
        self._live: dict[str, _Node] = {}  # nodes in service, by name
        self.head = NetworkHead()
        self.served = 0  # the highest eth_blockNumber answered: answers never decrease
        self.moves = 0  # times the network head's tag changed
        self.reorgs = 0  # ... of which the number stayed and the hash changed
        # Called with (node, reason) when a node's word takes it out of rotation.
        self.on_eject: Callable[[str, str], None] | None = None

    # -- input ---------------------------------------------------------------
    def observe(self, node: str, report: HeadReport) -> bool:
        """A probe's answer (HTTP: it vouches for its own latest); True when the tag changed.

        The probe also brings the node into service here (the pool only
        feeds probes of nodes in service).
        """
        if node not in self._known:
            raise KeyError(node)
        if node not in self._live:
            self._live[node] = _Node()
        old = self.head.tag
        self._vouch(node, report.number, report.hash, latest=True)
        seen = self._live.get(node)
        if seen is not None and seen.number >= 0:
            if report.safe is not None and seen.safe <= report.safe <= seen.number:
                seen.safe = report.safe
            if report.finalized is not None and seen.finalized <= report.finalized <= seen.number:
                seen.finalized = report.finalized
        self._recompute()
        return self.head.tag != old

    def claim(self, node: str, number: int, digest: str | None = None) -> bool:
        """A header pushed (or a number answered) by ``node``: True to ask it for the block.

        Nothing moves until ``vouch``; a claim that breaks a rule ejects the node.
        """
        seen = self._live.get(node)
        if seen is None:
            return False
        if digest is not None:
            seen.claims[number] = digest
            if len(seen.claims) > _CLAIMS_KEPT:
                del seen.claims[min(seen.claims)]
        if number <= seen.number and (digest is None or digest == self._hash_at(seen, number)):
            return False
        why = self._breaks_rule(node, number)
        if why is not None:
            self._eject(node, why)
            self._recompute()
            return False
        seen.claimed = max(seen.claimed, number)
        return True

    def vouch(self, node: str, number: int, digest: str | None) -> bool:
        """``node``'s HTTP answer named block ``number``: ``digest``; True if the tag moved."""
        if node not in self._live or digest is None:
            return False
        old = self.head.tag
        self._vouch(node, number, digest, latest=False)
        self._recompute()
        return self.head.tag != old

    def _vouch(self, node: str, number: int, digest: str | None, *, latest: bool) -> None:
        seen = self._live[node]
        if digest is None and not latest:
            return  # only the probe's latest block may lack a hash (nothing to compare)
        pushed = seen.claims.get(number)
        if pushed is not None and digest is not None and pushed != digest:
            del seen.claims[number]  # judged: the same header never counts twice
            seen.strikes += 1
            if seen.strikes >= self.rules.max_mismatches:
                self._eject(
                    node, f"{seen.strikes} headers its own HTTP answers contradict (block {number})"
                )
            return
        if pushed is not None and digest is not None:
            seen.strikes = 0
        if number < seen.number and not latest:
            return  # an older block: says nothing about its head
        if number == seen.number and digest == seen.hash:
            return
        why = self._breaks_rule(node, number)
        if why is not None:
            self._eject(node, why)
            return
        seen.number, seen.hash, seen.at = number, digest, self._clock()
        seen.safe = min(seen.safe, number)  # a node that went back takes its marks back
        seen.finalized = min(seen.finalized, number)

    def block_number(self) -> int:
        """What ``eth_blockNumber`` answers now: the head, never below an earlier answer."""
        if self.head.number > self.served:
            self.served = self.head.number
        return self.served

    def forget(self, node: str) -> None:
        """The node left service: nothing it said stays in force."""
        if self._live.pop(node, None) is not None:
            self._recompute()

    # -- the rule ------------------------------------------------------------
    def _breaks_rule(self, node: str, number: int) -> str | None:
        """Why ``node``'s head at ``number`` cannot be right, or None."""
        rules = self.rules
        others = [s.number for n, s in self._live.items() if n != node and s.number >= 0]
        if others and number - max(others) > rules.max_lead:
            return (
                f"head {number} is {number - max(others)} blocks ahead of every other node "
                f"in service (head.max_lead {rules.max_lead})"
            )
        return None

    def _eject(self, node: str, reason: str) -> None:
        if self._live.pop(node, None) is not None and self.on_eject is not None:
            self.on_eject(node, reason)

    def _recompute(self) -> None:
        """The network head from the nodes in service: leads judged, then number, hash, marks."""
        live = self._live
        lead = self.rules.max_lead
        heads = sorted((s.number for s in live.values() if s.number >= 0), reverse=True)
        if len(heads) > 1 and heads[0] - heads[1] > lead:
            top = next(n for n, s in live.items() if s.number == heads[0])
            self._eject(
                top,
                f"head {heads[0]} is {heads[0] - heads[1]} blocks ahead of every "
                f"other node in service (head.max_lead {lead})",
            )
            self._recompute()
            return
        old = self.head
        if not heads:
            number, digest = old.number, old.hash  # nobody to ask: keep the last known
        else:
            number = heads[0]
            at_top = [s for s in live.values() if s.number == number]
            if old.number == number and any(s.hash == old.hash for s in at_top):
                digest = old.hash
            else:
                digest = max(at_top, key=_when).hash  # the newest word wins a rival tip
        safe = max(old.safe, self._mark([s.safe for s in live.values()]))
        final = max(old.finalized, self._mark([s.finalized for s in live.values()]))
        new = NetworkHead(number, digest, min(safe, number), min(final, number))
        if new == old:
            return
        self.head = new
        if new.tag != old.tag:
            self.moves += 1
            if number == old.number:
                self.reorgs += 1

    def _mark(self, marks: list[int]) -> int:
        """The highest mark two nodes have reached (one configured node: its own)."""
        marks = sorted((m for m in marks if m >= 0), reverse=True)
        if len(self._known) == 1:
            return marks[0] if marks else -1
        return marks[1] if len(marks) > 1 else -1

    @staticmethod
    def _hash_at(seen: _Node, number: int) -> str | None:
        return seen.hash if number == seen.number else seen.claims.get(number)

    # -- queries -------------------------------------------------------------
    def node_head(self, node: str) -> int | None:
        """The node's confirmed head (None: not in service, or nothing confirmed yet)."""
        seen = self._live.get(node)
        return None if seen is None or seen.number < 0 else seen.number

    def lag(self, node: str) -> int | None:
        """Blocks ``node`` is behind the network head (None: unknown)."""
        number = self.node_head(node)
        return None if number is None else max(0, self.head.number - number)

    def has(self, node: str, block: int) -> bool:
        """Whether ``node`` confirmed a head at or above ``block``."""
        number = self.node_head(node)
        return number is not None and number >= block

    def nodes_with(self, block: int) -> list[str]:
        """Nodes known to have ``block``, for routing a call that names it."""
        return [n for n, s in self._live.items() if s.number >= block]

    def at_head(self, node: str) -> bool:
        """Whether ``node``'s confirmed head is the network head (its answers fit the tag)."""
        seen = self._live.get(node)
        head = self.head
        return seen is not None and seen.number >= head.number and seen.hash == head.hash

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
        """Seconds since ``node``'s head was last confirmed."""
        seen = self._live.get(node)
        return None if seen is None or seen.number < 0 else self._clock() - seen.at

    def lags(self) -> dict[str, int | None]:
        """Every node's lag, for the per-node head-lag gauge."""
        return {name: self.lag(name) for name in sorted(self._known)}


def _when(seen: _Node) -> float:
    return seen.at
