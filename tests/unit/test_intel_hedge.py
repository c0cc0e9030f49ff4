"""Hedging: latency windows, the delay clamp, the shared budget, run_hedged (no sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.intel.hedge import (
    Budget,
    HedgeStats,
    LatencyTracker,
    LatencyWindow,
    Launch,
    run_hedged,
    timed,
)


class FakeTimer:
    """The hedge timer: records the delays asked for; the test fires it by hand."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._events: list[asyncio.Event] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        event = asyncio.Event()
        self._events.append(event)
        await event.wait()

    def fire(self) -> None:
        self._events[-1].set()


class Attempts:
    """One future per attempt the runner starts; the test settles each by hand."""

    def __init__(self, nodes: int, delay: float | None = 0.2) -> None:
        self.nodes = nodes
        self.delay = delay
        self.futures: list[asyncio.Future[str]] = []
        self.cancelled: list[int] = []

    def __call__(self, n: int) -> Launch[str] | None:
        if n >= self.nodes:
            return None
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)

        async def attempt() -> str:
            try:
                return await fut
            except asyncio.CancelledError:
                self.cancelled.append(n)
                raise

        return Launch(attempt(), self.delay)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_window_percentile_nearest_rank() -> None:
    w = LatencyWindow(size=100)
    assert w.percentile() is None
    for i in range(1, 101):
        w.add(i / 1000)
    assert w.percentile() == 0.095
    w2 = LatencyWindow(size=4)
    for v in (1.0, 2.0, 3.0, 4.0, 9.0):  # the ring keeps the last 4
        w2.add(v)
    assert w2.percentile() == 9.0


def test_delay_is_p95_clamped() -> None:
    t = LatencyTracker(["a", "b", "c"], floor_s=0.05, ceiling_s=0.5, window=20)
    assert t.delay("a") == 0.5  # nothing known: the ceiling
    for _ in range(20):
        t.observe("a", 0.001)
        t.observe("b", 0.2)
        t.observe("c", 5.0)
    assert t.delay("a") == 0.05 and t.delay("b") == 0.2 and t.delay("c") == 0.5
    assert t.p95("c") == 5.0


def test_budget_ratio() -> None:
    b = Budget(0.2, tokens=0.0)
    assert not b.take()
    for _ in range(5):
        b.on_first_attempt()
    assert b.take() and not b.take()
    cap = Budget(1.0, tokens=0.0, cap=3.0)
    for _ in range(10):
        cap.on_first_attempt()
    assert cap.tokens == 3.0


async def test_a_fast_first_attempt_sends_no_hedge() -> None:
    timer, attempts, stats = FakeTimer(), Attempts(2), HedgeStats()
    run = asyncio.create_task(
        run_hedged(attempts, Budget(0.2), max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    attempts.futures[0].set_result("one")
    assert await run == "one"
    assert len(attempts.futures) == 1 and stats.hedges == 0
    assert timer.delays == [0.2]


async def test_a_slow_first_attempt_is_hedged_and_the_hedge_wins() -> None:
    timer, attempts, stats = FakeTimer(), Attempts(2), HedgeStats()
    run = asyncio.create_task(
        run_hedged(attempts, Budget(0.2), max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    timer.fire()  # the first node's p95 went by
    await settle()
    assert len(attempts.futures) == 2 and stats.hedges == 1
    attempts.futures[1].set_result("two")
    assert await run == "two"
    assert attempts.cancelled == [0]  # the loser is cancelled
    assert stats.hedges_won == 1


async def test_the_first_attempt_may_still_win_after_a_hedge() -> None:
    timer, attempts, stats = FakeTimer(), Attempts(2), HedgeStats()
    run = asyncio.create_task(
        run_hedged(attempts, Budget(0.2), max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    timer.fire()
    await settle()
    attempts.futures[0].set_result("one")
    assert await run == "one"
    assert attempts.cancelled == [1] and stats.hedges == 1 and stats.hedges_won == 0


async def test_a_failed_attempt_waits_for_the_hedge() -> None:
    timer, attempts = FakeTimer(), Attempts(3)
    run = asyncio.create_task(run_hedged(attempts, Budget(0.2), max_attempts=3, timer=timer))
    await settle()
    timer.fire()
    await settle()
    attempts.futures[0].set_exception(ConnectionError("reset"))
    await settle()
    assert len(attempts.futures) == 2  # no retry while the hedge is in flight
    attempts.futures[1].set_result("two")
    assert await run == "two"


async def test_a_failure_retries_at_once_and_the_retry_can_be_hedged() -> None:
    timer, attempts, stats = FakeTimer(), Attempts(3), HedgeStats()
    run = asyncio.create_task(
        run_hedged(attempts, Budget(0.2), max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    attempts.futures[0].set_exception(ConnectionError("refused"))
    await settle()
    assert len(attempts.futures) == 2 and stats.retries == 1
    timer.fire()
    await settle()
    assert len(attempts.futures) == 3 and stats.hedges == 1
    attempts.futures[2].set_result("three")
    assert await run == "three"


async def test_not_retryable_errors_are_raised() -> None:
    timer, attempts = FakeTimer(), Attempts(3)
    run = asyncio.create_task(
        run_hedged(
            attempts,
            Budget(0.2),
            max_attempts=3,
            retryable=lambda exc: not isinstance(exc, ValueError),
            timer=timer,
        )
    )
    await settle()
    attempts.futures[0].set_exception(ValueError("sent; never again"))
    with pytest.raises(ValueError):
        await run
    assert len(attempts.futures) == 1


async def test_writes_are_never_hedged() -> None:
    timer, attempts = FakeTimer(), Attempts(2, delay=None)
    run = asyncio.create_task(run_hedged(attempts, Budget(0.2), max_attempts=3, timer=timer))
    await settle()
    assert timer.delays == []
    attempts.futures[0].set_result("tx")
    assert await run == "tx"


async def test_an_empty_budget_refuses_hedges_and_retries() -> None:
    timer, attempts, stats = FakeTimer(), Attempts(3), HedgeStats()
    budget = Budget(0.0, tokens=0.0)
    run = asyncio.create_task(
        run_hedged(attempts, budget, max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    timer.fire()
    await settle()
    assert len(attempts.futures) == 1 and stats.denied == 1
    attempts.futures[0].set_exception(ConnectionError("x"))
    with pytest.raises(ConnectionError):
        await run
    assert stats.denied == 2


async def test_hedges_and_retries_draw_from_one_budget() -> None:
    budget = Budget(0.5, tokens=1.0)
    stats = HedgeStats()
    # call 1: the hedge takes the only token (+0.5 from the call itself)
    timer, attempts = FakeTimer(), Attempts(3)
    run = asyncio.create_task(
        run_hedged(attempts, budget, max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    timer.fire()
    await settle()
    attempts.futures[1].set_result("b")
    await run
    assert budget.tokens == 0.5
    # call 2 (+0.5 = 1.0): its retry takes the token, so nothing is left for a hedge
    timer, attempts = FakeTimer(), Attempts(3)
    run = asyncio.create_task(
        run_hedged(attempts, budget, max_attempts=3, stats=stats, timer=timer)
    )
    await settle()
    attempts.futures[0].set_exception(ConnectionError("x"))
    await settle()
    timer.fire()
    await settle()
    assert len(attempts.futures) == 2 and stats.denied == 1
    attempts.futures[1].set_result("b")
    assert await run == "b"


async def test_no_other_node_means_no_hedge_and_the_token_is_returned() -> None:
    timer, attempts = FakeTimer(), Attempts(1)
    budget = Budget(0.0, tokens=1.0)
    run = asyncio.create_task(run_hedged(attempts, budget, max_attempts=3, timer=timer))
    await settle()
    timer.fire()
    await settle()
    assert budget.tokens == 1.0
    attempts.futures[0].set_result("only")
    assert await run == "only"


async def test_cancelling_the_caller_cancels_every_attempt() -> None:
    timer, attempts = FakeTimer(), Attempts(2)
    run = asyncio.create_task(run_hedged(attempts, Budget(0.2), max_attempts=3, timer=timer))
    await settle()
    timer.fire()
    await settle()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert sorted(attempts.cancelled) == [0, 1]


async def test_no_node_at_all() -> None:
    with pytest.raises(LookupError):
        await run_hedged(Attempts(0), Budget(0.2), max_attempts=3, timer=FakeTimer())


async def test_timed_records_success_and_cancelled_losers() -> None:
    now = [0.0]
    tracker = LatencyTracker(["a"], floor_s=0.0, ceiling_s=10.0)
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def ok() -> str:
        now[0] += 0.3
        return "x"

    assert await timed(tracker, "a", ok(), lambda: now[0]) == "x"
    assert tracker.p95("a") == pytest.approx(0.3)
    task = asyncio.create_task(timed(tracker, "a", fut, lambda: now[0]))
    await settle()
    now[0] += 4.0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tracker.p95("a") == pytest.approx(4.0)  # a loser's time pushes the p95 up
