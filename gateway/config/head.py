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
    """How the network head is confirmed, and when a node's word takes it out of rotation."""

    # A node more than this many blocks ahead of every other node in service
    # is inconsistent (a far-future header).
    max_lead: int = 64
    # Headers whose hash its own HTTP answers contradict, in a row, before a
    # node is inconsistent (one is a re-org racing the answer).
    max_mismatches: int = 3
    # An inconsistent node stays out of rotation this long, then its next
    # probe brings it back with nothing of what it said before.
    inconsistent_cooldown_s: float = 60.0
