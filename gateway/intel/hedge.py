"""Hedged reads: a second attempt on another node when the first is slow.

``LatencyTracker`` keeps each node's recent latencies in a small ring and
answers their p95; the hedge delay is that p95 clamped to a floor (hedging
sooner doubles load for nothing) and a ceiling (a node that turned slow
must not teach us to wait for it). ``run_hedged`` starts attempt 1, and if it
has not answered after the delay, starts attempt 2 on another node; the
first good answer wins and the other attempt is cancelled. A failed attempt
starts a retry at once. Hedges and retries draw from one ``Budget``, so a
network that is slow everywhere gets at most ``ratio`` extra load, not double.

Time is injected: ``timer(delay)`` is awaited to wait for the hedge moment
(``asyncio.sleep`` in production, an event the test sets in unit tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LatencyWindow:
    """The last ``size`` latencies of one node; p95 recomputed every few samples."""

    __slots__ = ("_dirty", "_i", "_p", "_ring", "_value", "size")

    def __init__(self, size: int = 64, percentile: float = 0.95) -> None:
        self.size = max(1, size)
        self._p = percentile
        self._ring: list[float] = []
        self._i = 0
        self._dirty = 0
        self._value: float | None = None

    def add(self, seconds: float) -> None:
        ring = self._ring
        if len(ring) < self.size:
            ring.append(seconds)
        else:
            ring[self._i] = seconds
            self._i = (self._i + 1) % self.size
        self._dirty += 1

    def percentile(self) -> float | None:
        """The window's percentile (nearest rank), None before the first sample."""
        ring = self._ring
        if not ring:
            return None
        # Sorting 64 floats costs ~2 µs; once the ring is full, doing it every
        # 8th sample keeps the hot path cheap and the value at most 8 samples old.
        if self._value is None or (self._dirty and (self._dirty >= 8 or len(ring) < self.size)):
            ordered = sorted(ring)
            rank = min(len(ordered) - 1, max(0, int(self._p * len(ordered) + 0.999999) - 1))
            self._value = ordered[rank]
            self._dirty = 0
        return self._value

    def quantile(self, p: float) -> float | None:
        """The window's ``p`` quantile (nearest rank), None before the first sample."""
        if not self._ring:
            return None
        ordered = sorted(self._ring)
        return ordered[min(len(ordered) - 1, max(0, int(p * len(ordered) + 0.999999) - 1))]


class LatencyTracker:
    """Per-node latency windows and the hedge delay they imply."""

    __slots__ = ("_windows", "ceiling_s", "floor_s")

    def __init__(
        self,
        nodes: Iterable[str],
        *,
        floor_s: float,
        ceiling_s: float,
        window: int = 64,
        percentile: float = 0.95,
    ) -> None:
        self.floor_s = floor_s
        self.ceiling_s = max(floor_s, ceiling_s)
        self._windows = {name: LatencyWindow(window, percentile) for name in nodes}

    def observe(self, node: str, seconds: float) -> None:
        """One attempt's time: a success's latency, or how long a cancelled loser had run.

        A loser's time is a lower bound of its latency; recording it pushes a
        hanging node's p95 up to the ceiling, which is what we want.
        """
        self._windows[node].add(seconds)

    def p95(self, node: str) -> float | None:
        return self._windows[node].percentile()

    def quantiles(self, node: str, *ps: float) -> list[float | None]:
        """``node``'s latencies at each of ``ps`` (nearest rank) over its window, for
        an operator's view (sorts the window each call: not for the hot path)."""
        window = self._windows.get(node)
        return [None if window is None else window.quantile(p) for p in ps]

    def delay(self, node: str) -> float:
        """Seconds to wait on ``node`` before hedging: clamp(p95, floor, ceiling).

        No samples yet: the ceiling (hedge late rather than double every
        call while nothing is known).
        """
        p95 = self._windows[node].percentile()
        if p95 is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, p95))


class Budget:
    """Extra attempts (retries and hedges) as a fraction of first attempts: a token bucket."""

    __slots__ = ("cap", "ratio", "tokens")

    def __init__(self, ratio: float, tokens: float = 10.0, cap: float = 100.0) -> None:
        self.ratio = ratio
        self.tokens = min(tokens, cap)
        self.cap = cap

    def on_first_attempt(self) -> None:
        tokens = self.tokens + self.ratio
        self.tokens = tokens if tokens < self.cap else self.cap

    def take(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(slots=True)
class HedgeStats:
    """Counters the pool exports as metrics (hedges sent and won, retries)."""

    hedges: int = 0
    hedges_won: int = 0
    retries: int = 0
    denied: int = 0  # a hedge or retry the budget refused


@dataclass(frozen=True, slots=True)
class Launch(Generic[T]):
    """One attempt the factory started: its awaitable and the hedge delay after it."""

    attempt: Awaitable[T]
    hedge_after_s: float | None  # None: never hedge this attempt (e.g. a write)


Timer = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]


async def timed(tracker: LatencyTracker, node: str, attempt: Awaitable[T], clock: Clock) -> T:
    """``await attempt``, recording its latency on ``node``: on success, and when cancelled.

    Failures are not recorded: a node that refuses at once would otherwise
    look fast and be hedged later than its real answers deserve.
    """
    started = clock()
    try:
        result = await attempt
    except asyncio.CancelledError:
        tracker.observe(node, clock() - started)
        raise
    tracker.observe(node, clock() - started)
    return result


async def run_hedged(
    factory: Callable[[int], Launch[T] | None],
    budget: Budget,
    *,
    max_attempts: int,
    retryable: Callable[[BaseException], bool] = lambda exc: True,
    stats: HedgeStats | None = None,
    timer: Timer = asyncio.sleep,
    discard: Callable[[T], None] | None = None,
) -> T:
    """The first good answer among a first attempt, at most one hedge, and retries.

    ``factory(n)`` starts attempt ``n`` (0 = first) on a node not yet tried
    and returns it, or None when no node is left. An attempt that raises is
    bad: when nothing else is in flight, ``retryable(exc)`` holds and the
    budget allows, another attempt starts at once (and may itself be hedged
    if no hedge was sent yet); once nothing is in flight and nothing more
    may start, the last error is raised. Every attempt but the winner is
    cancelled, and cancelling the caller cancels them all. ``discard`` gets
    any other good answer that finished with the winner (to release it: a
    streamed answer holds a connection).
    """
    stats = stats if stats is not None else HedgeStats()
    budget.on_first_attempt()
    first = factory(0)
    if first is None:
        raise LookupError("no node to try")
    started = 1
    running: dict[asyncio.Future[Any], int] = {asyncio.ensure_future(first.attempt): 0}
    hedge_after = first.hedge_after_s
    hedge_index = -1  # the attempt that was the hedge, once one was sent
    timer_task: asyncio.Future[Any] | None = None
    last: BaseException | None = None

    def launch() -> Launch[T] | None:
        nonlocal started
        if started >= max_attempts:
            return None
        if not budget.take():
            stats.denied += 1
            return None
        nxt = factory(started)
        if nxt is None:
            budget.tokens += 1.0  # nothing was sent: the token goes back
            return None
        running[asyncio.ensure_future(nxt.attempt)] = started
        started += 1
        return nxt

    try:
        while running:
            if timer_task is None and hedge_after is not None and hedge_index < 0:
                timer_task = asyncio.ensure_future(timer(hedge_after))
            waiting = set(running)
            if timer_task is not None:
                waiting.add(timer_task)
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if timer_task is not None and timer_task in done:
                done.discard(timer_task)
                timer_task = None
                hedge_after = None
                if launch() is not None:
                    stats.hedges += 1
                    hedge_index = started - 1
            winner: asyncio.Future[Any] | None = None
            for task in done:
                index = running.pop(task)
                exc = task.exception()
                if exc is None:
                    if winner is None:
                        winner = task
                        if index == hedge_index:
                            stats.hedges_won += 1
                    elif discard is not None:
                        discard(task.result())
                    continue
                last = exc
            if winner is not None:
                result: T = winner.result()
                return result
            if running or last is None:
                continue
            # Everything sent so far failed: retry at once if allowed.
            if timer_task is not None:
                timer_task.cancel()
                timer_task = None
            if retryable(last):
                nxt = launch()
                if nxt is not None:
                    stats.retries += 1
                    hedge_after = nxt.hedge_after_s
        assert last is not None
        raise last
    finally:
        pending = [t for t in running if not t.done()]
        if timer_task is not None:
            pending.append(timer_task)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
