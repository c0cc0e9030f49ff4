"""The mock chain's block clock, which the head tests measure the gateway against.

The chain shares its process with the gateway it feeds. After that process
stalls (a loaded box), it must not hand over the stall's blocks in one burst:
the gateway would then be measured on catching up with a burst that no real
chain makes, each block a round trip to confirm.
"""

from __future__ import annotations

import asyncio
import time

from gateway.demo.mockws import Chain


async def test_slots_missed_in_a_stall_are_skipped_and_stamps_stay_on_the_clock() -> None:
    chain = Chain(block_time_s=0.4)
    chain.start()
    try:
        await asyncio.sleep(0.5)  # one block
        before = chain.head
        time.sleep(2.0)  # noqa: ASYNC251 (on purpose: the whole process stalls for five slots)
        await asyncio.sleep(0.25)
        after_stall = chain.head
        await asyncio.sleep(0.5)  # the clock goes on at its rate
        now = time.time()
        head = chain.block(chain.head)
    finally:
        await chain.stop()
    # One block for the stall, not the five slots it slept through mined back to back.
    assert after_stall - before == 1, (before, after_stall)
    assert chain.head - after_stall in (1, 2)
    assert head is not None and abs(int(head["timestamp"], 16) - now) <= 1.0
    stamps = [
        int(b["timestamp"], 16) for n in range(before - 1, chain.head + 1) if (b := chain.block(n))
    ]
    assert stamps == sorted(stamps)
