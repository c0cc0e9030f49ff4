"""Coalescer: one upstream call per identical concurrent read; failures shared too."""

from __future__ import annotations

import asyncio

import pytest

from gateway.intel.coalesce import Coalescer


class Upstream:
    """A fake node call the test releases by hand (no sleeps)."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail: Exception | None = None
        self.cancelled = 0

    async def __call__(self) -> bytes:
        self.calls += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail is not None:
            raise self.fail
        return b"answer-%d" % self.calls


async def test_identical_concurrent_calls_share_one_upstream_call() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    tasks = [asyncio.create_task(co.run(("k", 1), up)) for _ in range(10)]
    await asyncio.sleep(0)
    assert co.in_flight() == 1
    up.release.set()
    assert await asyncio.gather(*tasks) == [b"answer-1"] * 10
    assert up.calls == 1 and co.calls == 1 and co.coalesced == 9
    assert co.in_flight() == 0


async def test_different_keys_do_not_share() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    tasks = [asyncio.create_task(co.run(key, up)) for key in ("a", "b", ("a", 2))]
    await asyncio.sleep(0)
    up.release.set()
    await asyncio.gather(*tasks)
    assert up.calls == 3 and co.coalesced == 0


async def test_a_failure_is_shared_not_retried() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    up.fail = TimeoutError("node timed out")
    tasks = [asyncio.create_task(co.run("k", up)) for _ in range(5)]
    await asyncio.sleep(0)
    up.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, TimeoutError) for r in results)
    assert up.calls == 1


async def test_the_next_call_after_completion_is_a_new_flight() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    up.release.set()
    assert await co.run("k", up) == b"answer-1"
    assert await co.run("k", up) == b"answer-2"  # no stale sharing once done
    assert up.calls == 2


async def test_one_caller_leaving_does_not_cancel_the_others() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    first = asyncio.create_task(co.run("k", up))
    second = asyncio.create_task(co.run("k", up))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert up.cancelled == 0
    up.release.set()
    assert await second == b"answer-1"


async def test_the_call_is_cancelled_when_every_caller_left() -> None:
    co: Coalescer[bytes] = Coalescer()
    up = Upstream()
    callers = [asyncio.create_task(co.run("k", up)) for _ in range(2)]
    await asyncio.sleep(0)
    for task in callers:
        task.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await asyncio.sleep(0)
    assert up.cancelled == 1 and co.in_flight() == 0
    # a caller arriving afterwards starts afresh instead of joining the cancelled call
    up.release.set()
    assert await co.run("k", up) == b"answer-2"
