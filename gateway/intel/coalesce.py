"""Identical concurrent reads share one upstream call (request coalescing).

The first caller of a key starts the call as a task; callers that arrive
while it is in flight wait on the same task (``asyncio.shield``, so one
caller's disconnect does not cancel it for the others). The result *and a
failure* are shared: ten callers of a call that timed out get the same
error at once instead of ten retries hammering the nodes. The task is
cancelled only when every caller has gone.

The key is the caller's business; the pool uses ``(call_key, head.tag)`` so a
call is only shared with callers that asked at the same head. Each caller
re-addresses the shared answer to its own id (the answer carries the
gateway's upstream id, never a client's).

Memory: a flight holds the node's answer only until its callers have it;
nothing outlives the flight (what is kept goes to ``ResponseCache.put``,
which stores exact-size copies and counts them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Flight(Generic[T]):
    __slots__ = ("task", "waiters")

    def __init__(self, task: asyncio.Future[T]) -> None:
        self.task = task
        self.waiters = 0


class Coalescer(Generic[T]):
    """Shares in-flight calls by key; ``calls`` started, ``coalesced`` callers who joined one."""

    __slots__ = ("_flights", "calls", "coalesced")

    def __init__(self) -> None:
        self._flights: dict[Hashable, _Flight[T]] = {}
        self.calls = 0
        self.coalesced = 0

    def in_flight(self) -> int:
        return len(self._flights)

    async def run(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        """``await call()``, or join the identical call already in flight."""
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight(asyncio.ensure_future(call()))
            self._flights[key] = flight
            flight.task.add_done_callback(self._finished(key, flight))
            self.calls += 1
        else:
            self.coalesced += 1
        flight.waiters += 1
        try:
            return await asyncio.shield(flight.task)
        except asyncio.CancelledError:
            if not flight.task.done() and flight.waiters == 1:
                # The last caller left: stop the call, and make sure nobody
                # joins a flight that is being cancelled.
                if self._flights.get(key) is flight:
                    del self._flights[key]
                flight.task.cancel()
            raise
        finally:
            flight.waiters -= 1

    def _finished(self, key: Hashable, flight: _Flight[T]) -> Callable[[asyncio.Future[T]], None]:
        def done(task: asyncio.Future[T]) -> None:
            if self._flights.get(key) is flight:
                del self._flights[key]
            if not task.cancelled():
                task.exception()  # retrieved: a failure nobody awaited is not logged as lost

        return done
