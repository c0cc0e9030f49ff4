"""flush_every: ends on cancel even when the flush swallows the cancellation, and flushes last."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.redis.flushing import cancelling, flush_every


async def test_a_swallowed_cancel_still_ends_the_loop() -> None:
    calls = 0
    inside = asyncio.Event()

    async def flush() -> None:
        nonlocal calls
        calls += 1
        inside.set()
        # a Redis command in flight; redis-py may drop the connection and return
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)

    task = asyncio.create_task(flush_every(0.001, flush))
    await inside.wait()
    task.cancel()
    async with asyncio.timeout(2):  # a bare sleep/flush loop never ends here
        await task
    assert calls >= 2  # the interrupted flush, then the last one on the way out


async def test_cancel_during_the_sleep_flushes_once_more() -> None:
    flushed: list[int] = []

    async def flush() -> None:
        flushed.append(1)

    task = asyncio.create_task(flush_every(60, flush))
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert flushed == [1]


async def test_key_events_stop_when_a_cancel_is_swallowed() -> None:
    """KeyEvents.run ends on cancel even if the Redis client swallows the CancelledError."""
    from typing import Any

    from redis.exceptions import ConnectionError as RedisConnectionError

    from gateway.store.keyevents import KeyEvents

    waiting = asyncio.Event()

    class _PubSub:
        async def __aenter__(self) -> _PubSub:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def subscribe(self, channel: str) -> None:
            return None

        async def get_message(self, timeout: float) -> Any:  # noqa: ASYNC109 (redis-py's)
            waiting.set()
            try:
                await asyncio.sleep(timeout)
            except asyncio.CancelledError:  # what redis-py may turn a cancel into
                raise RedisConnectionError("connection dropped") from None
            return None

    class _Client:
        def pubsub(self, **kw: Any) -> _PubSub:
            return _PubSub()

        async def aclose(self) -> None:
            return None

    events = KeyEvents(lambda: _Client(), "p")  # type: ignore[arg-type, return-value]
    task = asyncio.create_task(events.run())
    await waiting.wait()
    task.cancel()
    async with asyncio.timeout(2):  # before the fix: reconnects forever
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_loop_on_cancelling_ends_when_its_step_swallowed_the_cancellation() -> None:
    """redis-py may turn a cancellation inside a command into an ordinary error: a
    ``while True`` loop that logs errors then ran on forever and hung the app's
    cleanup; ``while not cancelling()`` ends."""
    rounds = 0

    async def step() -> None:  # as a redis-py command does when a cancel lands in it
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise ConnectionError("connection dropped") from None

    async def loop() -> None:
        nonlocal rounds
        while not cancelling():
            rounds += 1
            with contextlib.suppress(ConnectionError):
                await step()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.wait_for(asyncio.shield(task), 1.0)  # ended on its own, not by a second cancel
    assert rounds == 1
