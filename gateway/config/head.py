"""The ``[head]`` section: how the network head is confirmed, and when a node's word
costs it its place in rotation (``gateway.intel.head`` applies it).

Same rules as schema.py (frozen dataclass, the field defaults are the shipped
defaults, load.py type-checks TOML against the annotations). No rule judges a
node's speed: one catching up after a stall runs fast and is right.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeadConfig:
    """How the network head is agreed, and when a node's word takes it out of rotation."""

    # A node is current while its confirmed head's timestamp is within this
    # many seconds of the newest confirmed head among the nodes in service
    # (0: ten of the network's block_time_s). A node not current is behind:
    # no head-relative call, no part in the head, but it stays in rotation.
    stale_s: float = 0.0
    # How many current nodes must have confirmed a block with the same hash
    # before it is the network head (0: 2 where two or more nodes are
    # current, else 1; 1 follows the fastest node).
    quorum: int = 0
    # Blocks a single node may lead the agreed block by, along its chain.
    solo_lead: int = 1
    # A block stamped more than this many seconds in the future is a lie.
    clock_skew_s: float = 2.0
    # Headers whose hash its own HTTP answers contradict, in a row, before a
    # node is inconsistent (one is a re-org racing the answer).
    max_mismatches: int = 3
    # An inconsistent node stays out of rotation this long, then its next
    # probe brings it back with nothing of what it said before.
    inconsistent_cooldown_s: float = 60.0
