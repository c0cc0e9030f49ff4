"""Make an app's usage counters readable now instead of within a second.

With leased admission (the default) usage is summed in the process and
written once a second, and leased units not yet spent count as used until
they go back (within ``admission.lease_idle_s``). ``settle`` does right away
what those background loops do, so a test can read exact numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway import typedefs as T
from gateway.limits.leasing import LeaseLimiter


async def settle(app: web.Application) -> None:
    limiter = app.get(T.LIMITER)
    if isinstance(limiter, LeaseLimiter):
        await limiter.give_back_idle(everything=True)
    sink = app.get(T.USAGE)
    if sink is not None:
        await sink.flush()


async def until_status(
    post: Callable[[], Awaitable[int]], status: int, within_s: float = 1.0
) -> float:
    """Seconds until ``post()`` answers ``status``; fails past ``within_s``.

    A revoked key stops working on every process once the pub/sub message
    arrives (milliseconds), not necessarily on the very next call: the scale rules
    asks for under one second, and that is what callers assert.
    """
    start = time.monotonic()
    while True:
        if await post() == status:
            return time.monotonic() - start
        if time.monotonic() - start > within_s:
            raise AssertionError(f"no {status} within {within_s} s")
        await asyncio.sleep(0.01)
