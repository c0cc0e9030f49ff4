"""When each block of a mock chain on a timer was made: its ``timestamp``.

A block is stamped when its slot came due, the same on every call. The mock
chain shares its process with what it feeds (tests, the demo); when that
process stalls, the slots it slept through are skipped rather than mined in
one burst, and each skip starts a new stretch here, so later blocks stay
stamped on the wall clock.
"""

from __future__ import annotations

import time

# Stretches kept; a block older than all of them but the first is stamped as
# if no slot before it had been skipped.
STRETCHES = 256


class BlockClock:
    """Stretches of ``(first block, its time.time())``, one block every ``block_time_s``."""

    __slots__ = ("_stretches", "block_time_s")

    def __init__(self, head: int, at: float, block_time_s: float) -> None:
        self.block_time_s = block_time_s
        self._stretches = [(head, at)]

    def made_at(self, number: int) -> float:
        """The ``time.time()`` block ``number`` was due."""
        stretches = self._stretches
        first, at = next((s for s in reversed(stretches) if s[0] <= number), stretches[0])
        return at + (number - first) * self.block_time_s

    def settle(self, due: float, number: int) -> float:
        """Block ``number``'s slot, due at ``due`` (``time.monotonic()``), is mined now:
        the slot it is mined in. Woken over half a block late (the process stalled),
        the slots slept through are skipped: the block is stamped at the newest one,
        and so is every block after it. A real chain would not hand over a stall's
        blocks in one burst, each a round trip for the gateway to confirm."""
        step = self.block_time_s
        late = time.monotonic() - due
        slots = int(late // step) if late > step / 2 else 0
        if slots:
            self._stretches.append((number, self.made_at(number) + slots * step))
            del self._stretches[1:-STRETCHES]  # bounded: the first and the newest kept
        return due + slots * step
