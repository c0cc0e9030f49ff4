"""The ``[head]`` section: how the network head is confirmed, and when a node's word
costs it its place in rotation (``gateway.intel.head`` applies it).

Same rules as schema.py (frozen dataclass, the field defaults are the shipped
defaults, load.py type-checks TOML against the annotations). The network's
block interval, which the rate check needs, is per network
(``networks.<name>.block_time_s``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeadConfig:
    """How the network head is confirmed, and when a node's word takes it out of rotation."""

    # A node more than this many blocks ahead of every other node in service
    # is inconsistent (a far-future header), as is one whose head runs faster
    # than the network's block_time_s allows (plus rate_slack_blocks).
    max_lead: int = 64
    rate_slack_blocks: int = 4
    # Headers whose hash its own HTTP answers contradict, in a row, before a
    # node is inconsistent (one is a re-org racing the answer).
    max_mismatches: int = 3
    # An inconsistent node stays out of rotation this long, then its next
    # probe brings it back with nothing of what it said before.
    inconsistent_cooldown_s: float = 60.0
