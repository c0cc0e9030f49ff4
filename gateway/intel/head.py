"""One network's head, agreed: no node moves the chain alone.

Every source feeds one object (``HeadTracker``) with one rule. A node's
*claim* (a ``newHeads`` header, an ``eth_blockNumber`` answer) moves
nothing; a block counts only once that node's HTTP answer for that number
carries a hash (``vouch``: the probe's latest block, a confirmation fetch,
a block, receipt or log a client read returned), and that hash matches
any header the node pushed for the number.

The network head is agreed among the *current* nodes: those whose
confirmed head's timestamp is within ``stale_s`` of the newest one among
the nodes in service (a halted or idle chain leaves every node current). A
node that is not current is behind: it takes no part in the head and gets
no head-relative call, but stays in rotation. The head is the highest
block ``quorum`` current nodes confirmed with the same hash, led by one
node by at most ``solo_lead`` blocks along that block's chain. Where
current nodes confirmed different hashes above the agreed block, the
network is *split*: the head stays at the agreed block (``split`` says so,
``on_split`` is told) until they agree again.

Only a lie proven takes a node out (``on_eject``): headers its own answers
keep contradicting (``max_mismatches`` in a row), or a block stamped more
than ``clock_skew_s`` in the future of the clock, of every other node's
newest block, and of what its own last block explains: a chain stamps each
block at least a second after its parent, so a dev chain mining a burst
(``hardhat_mine``, a block per transaction) runs a second a block ahead of
the clock and is right, and Hardhat keeps that lead on every later block,
so a block may lead the clock by its last block's lead plus a second a
block (a lone node has nobody to be ahead of). A stamp
ahead of the clock counts as the clock for currency, so no stamp makes an
honest node look behind. Speed, lead and lag take no node out. Whenever a node leaves, the head is
recomputed from the nodes still in service; ``served`` keeps the
``eth_blockNumber`` answers monotonic.

Safe and finalized marks: a node's mark above its own confirmed head, or
below its previous mark, is ignored; the network's mark is the highest one
``quorum`` (at least two) nodes in service have reached; a network of one
configured node takes its marks only at least two blocks below its head,
so a short re-org never replaces a block served as final. Marks never go
back.

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

from gateway.intel.agreement import CLAIMS_KEPT, NodeRecord, agreed, when_confirmed
from gateway.intel.headwire import (
    PROBE_BODY,
    HeadReport,
    HeadRules,
    NetworkHead,
    block_mark,
    block_parent,
    block_stamp,
    parse_probe,
)

# Read here by the pool, the reads and the tests: the tracker's own vocabulary.
__all__ = [
    "PROBE_BODY",
    "HeadReport",
    "HeadRules",
    "HeadTracker",
    "NetworkHead",
    "block_mark",
    "block_parent",
    "block_stamp",
    "parse_probe",
]


class HeadTracker:
    """The heads of one network's nodes; ``head`` is the agreed network head."""

    __slots__ = (
        "_clock",
        "_current",
        "_known",
        "_live",
        "_wall",
        "head",
        "moves",
        "on_eject",
        "on_split",
        "reorgs",
        "rules",
        "served",
        "split",
    )

    def __init__(
        self,
        nodes: Iterable[str],
        clock: Callable[[], float] = time.monotonic,
        rules: HeadRules | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall = wall  # the clock block timestamps are read against
        self.rules = rules or HeadRules()
        self._known = frozenset(nodes)
        self._live: dict[str, NodeRecord] = {}  # nodes in service, by name
        self._current: frozenset[str] = frozenset()  # as of the last recompute
        self.head = NetworkHead()
        self.served = 0  # the highest eth_blockNumber answered: answers never decrease
        self.moves = 0  # times the network head's tag changed
        self.reorgs = 0  # ... of which the number stayed and the hash changed
        self.split = False  # current nodes confirmed different hashes above the head
        # Called with (node, reason) when a node's word takes it out of rotation.
        self.on_eject: Callable[[str, str], None] | None = None
        # Called with (split, detail) when the network splits or agrees again.
        self.on_split: Callable[[bool, str], None] | None = None

    # -- input ---------------------------------------------------------------
    def observe(self, node: str, report: HeadReport) -> bool:
        """A probe's answer (HTTP: it vouches for its own latest); True when the tag changed.

        The probe also brings the node into service here (the pool only
        feeds probes of nodes in service).
        """
        if node not in self._known:
            raise KeyError(node)
        if node not in self._live:
            self._live[node] = NodeRecord()
        old = self.head.tag
        self._vouch(node, report.number, report.hash, report.stamp, report.parent, latest=True)
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

        Nothing moves until ``vouch``.
        """
        seen = self._live.get(node)
        if seen is None:
            return False
        if digest is not None:
            seen.claims[number] = digest
            if len(seen.claims) > CLAIMS_KEPT:
                del seen.claims[min(seen.claims)]
        if number <= seen.number and (digest is None or digest == seen.says(number)):
            return False
        seen.claimed = max(seen.claimed, number)
        return True

    def vouch(
        self,
        node: str,
        number: int,
        digest: str | None,
        stamp: int | None = None,
        parent: str | None = None,
    ) -> bool:
        """``node``'s HTTP answer named block ``number``: ``digest``; True if the tag moved."""
        if node not in self._live or digest is None:
            return False
        old = self.head.tag
        self._vouch(node, number, digest, stamp, parent, latest=False)
        self._recompute()
        return self.head.tag != old

    def _vouch(
        self,
        node: str,
        number: int,
        digest: str | None,
        stamp: int | None,
        parent: str | None,
        *,
        latest: bool,
    ) -> None:
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
        if stamp is not None and self._in_future(node, number, stamp):
            skew = self.rules.clock_skew_s
            self._eject(
                node,
                f"block {number} is stamped {stamp - self._wall():.0f} s in the future "
                f"(head.clock_skew_s {skew:g})",
            )
            return
        if digest is not None:
            seen.keep(number, digest)
            if parent is not None and number > 0:
                seen.keep(number - 1, parent)
        if number < seen.number and not latest:
            return  # an older block: says nothing about its head
        if number == seen.number and digest == seen.hash:
            return
        if number != seen.number or stamp is not None:
            seen.stamp = stamp  # unknown stays unknown rather than borrowing an older one
            seen.lead = None if stamp is None else stamp - self._wall()
        seen.number, seen.hash, seen.at = number, digest, self._clock()
        seen.safe = min(seen.safe, number)  # a node that went back takes its marks back
        seen.finalized = min(seen.finalized, number)

    def _in_future(self, node: str, number: int, stamp: int) -> bool:
        """Whether block ``number`` stamped ``stamp`` is a lie: more than the clock
        skew ahead of the clock, of every other node's newest block (one node's
        future, not the whole chain's), and of the clock by more than the node's
        own last block was plus a second a block. A chain stamps a block at least
        a second after its parent, so a burst runs that far ahead of the clock and
        is right; Hardhat then keeps the lead, stamping a block made seconds later
        as far ahead, so it is the lead that is bounded, not the stamps' gap. With
        no earlier block of its own to measure by, nothing is proven."""
        skew = self.rules.clock_skew_s
        now = self._wall()
        if stamp <= now + skew:
            return False
        others = [s.stamp for n, s in self._live.items() if n != node and s.stamp is not None]
        if not others or stamp <= max(others) + skew:
            return False
        own = self._live[node]
        if own.lead is None or own.number < 0 or number <= own.number:
            return False
        return stamp - now > own.lead + (number - own.number) + skew

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
    def _eject(self, node: str, reason: str) -> None:
        if self._live.pop(node, None) is not None and self.on_eject is not None:
            self.on_eject(node, reason)

    def _currents(self) -> dict[str, NodeRecord]:
        """The nodes in service whose confirmed head is fresh enough to take part."""
        heads = {n: s for n, s in self._live.items() if s.number >= 0}
        stale = self.rules.stale_s
        stamps = [s.stamp for s in heads.values() if s.stamp is not None]
        if stale <= 0 or not stamps:
            return heads
        # a stamp ahead of the clock reads as the clock: none makes the others stale
        floor = min(max(stamps), self._wall() + self.rules.clock_skew_s) - stale
        return {n: s for n, s in heads.items() if s.stamp is None or s.stamp >= floor}

    def _quorum(self, current: int) -> int:
        want = self.rules.quorum or 2
        return max(1, min(want, current))

    def _recompute(self) -> None:
        """The network head from the current nodes: agreed block, solo lead, marks."""
        live = self._live
        current = self._currents()
        self._current = frozenset(current)
        old = self.head
        quorum = self._quorum(len(current))
        nodes = list(current.values())
        split = False
        if not nodes:
            number, digest = old.number, old.hash  # nobody to ask: keep the last known
        else:
            number, digest, split = agreed(nodes, quorum)
            # Nodes that moved on past what one node may lead, a quorum of them,
            # without agreeing on any block up there: split as much as a hash
            # they contradict each other with.
            beyond = sum(1 for n in nodes if n.number > number + self.rules.solo_lead)
            split = split or (quorum > 1 and beyond >= quorum)
            if number < 0:
                # No block two of them confirmed: the last agreed one, but never
                # above every current node's head (what one node alone set, the
                # first to answer, gives way to the lowest word).
                low = min(nodes, key=lambda n: n.number)
                if old.number > low.number or old.hash is None:
                    number, digest = low.number, low.hash
                else:
                    number, digest = old.number, old.hash
            elif not split and digest is not None:
                number, digest = self._lead(nodes, number, digest, quorum)
        # One configured node is all there is to follow; with more, one node's
        # word (the first to answer, or the last left) makes nothing final.
        single = len(self._known) == 1
        marks_q = max(2, quorum) if not single else 1
        safe = max(old.safe, self._mark([s.safe for s in live.values()], marks_q, single))
        final = max(
            old.finalized, self._mark([s.finalized for s in live.values()], marks_q, single)
        )
        if single and live:
            only = next(iter(live.values()))
            safe = min(safe, max(old.safe, only.number - 2))
            final = min(final, max(old.finalized, only.number - 2))
        new = NetworkHead(number, digest, min(safe, number), min(final, number))
        self._set_split(split, number)
        if new == old:
            return
        self.head = new
        if new.tag != old.tag:
            self.moves += 1
            if number == old.number:
                self.reorgs += 1

    def _lead(
        self, nodes: list[NodeRecord], number: int, digest: str, quorum: int
    ) -> tuple[int, str | None]:
        """The agreed block, led by the freshest node by at most ``solo_lead`` along it."""
        best: tuple[int, str | None] = (number, digest)
        if quorum < 2:
            return best  # one current node: the agreed block is its head already
        lead = self.rules.solo_lead
        for seen in sorted(nodes, key=when_confirmed):
            if seen.number <= number or seen.says(number) != digest:
                continue
            for ahead in range(min(seen.number, number + lead), best[0], -1):
                said = seen.says(ahead)
                if said is not None:  # its block `ahead` above the agreed one
                    best = (ahead, said)
                    break
        return best

    def _set_split(self, split: bool, number: int) -> None:
        if split == self.split:
            return
        self.split = split
        if self.on_split is not None:
            heads = ", ".join(
                f"{n}={s.number}:{(s.hash or '?')[:10]}" for n, s in sorted(self._live.items())
            )
            self.on_split(split, f"agreed block {number}; nodes {heads}")

    @staticmethod
    def _mark(marks: list[int], quorum: int, single: bool) -> int:
        """The highest mark ``quorum`` nodes have reached."""
        marks = sorted((m for m in marks if m >= 0), reverse=True)
        if single:
            return marks[0] if marks else -1
        return marks[quorum - 1] if len(marks) >= quorum else -1

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
        """Nodes known to have ``block`` on the agreed chain, for routing a call that names it.

        A node that is behind (not current), ahead without having said the
        head's hash at its number, or further ahead than one node may lead,
        is left out: a head-relative call never reaches a node whose answer
        may not be the head's.
        """
        head = self.head
        top = max(block, head.number) + self.rules.solo_lead
        fits = {
            n: s
            for n, s in self._live.items()
            if s.number >= block
            and n in self._current
            and (s.number < head.number or s.says(head.number) == head.hash)
        }
        near = [n for n, s in fits.items() if s.number <= top]
        if near or not fits:
            return near
        # Every node on the agreed chain moved on past one node's lead (the
        # head is held): the one nearest the head, whose answer strays least.
        low = min(s.number for s in fits.values())
        return [n for n, s in fits.items() if s.number == low]

    def knows(self, node: str, number: int) -> bool:
        """Whether ``node`` confirmed a hash at ``number`` (what agreement can count)."""
        seen = self._live.get(node)
        return seen is not None and seen.says(number) is not None

    def current(self, node: str) -> bool:
        """Whether ``node`` takes part in the head (its head is fresh enough)."""
        return node in self._current

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
