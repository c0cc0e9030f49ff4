"""argon2 in bounded threads, and the same work for emails with and without
an account."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Literal

import pytest
from argon2 import PasswordHasher
from redis.asyncio import Redis

from gateway.store.accounts import HASH_NICE, Busy, Store
from tests.helpers.dashboard import new_email


class WatchedHasher(PasswordHasher):
    """The real argon2, plus a record of which thread ran it and how many ran at once."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.delay_s = delay_s
        self.verified = 0
        self.hashed = 0
        self.threads: set[int] = set()
        self.nice: set[int] = set()
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()
        self.started = threading.Event()

    def _enter(self) -> None:
        with self._lock:
            self.threads.add(threading.get_ident())
            self.nice.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            self.running += 1
            self.most = max(self.most, self.running)
        self.started.set()
        time.sleep(self.delay_s)

    def _leave(self) -> None:
        with self._lock:
            self.running -= 1

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        self._enter()
        try:
            self.hashed += 1
            return super().hash(password, salt=salt)
        finally:
            self._leave()

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        self._enter()
        try:
            self.verified += 1
            return super().verify(hash, password)
        finally:
            self._leave()


async def test_unknown_emails_do_the_same_argon2_work(redis: Redis, prefix: str) -> None:
    hasher = WatchedHasher()
    store = Store(redis, prefix=prefix, hasher=hasher)
    email = new_email()
    acct = await store.create_account(email, "long enough pw")
    await store.verify_password("warm@example.com", "x" * 10)  # the dummy hash, once
    counts = []
    for who, pw in (
        (email, "long enough pw"),
        (email, "wrong pw!"),
        ("nobody@x.io", "a guess"),
        ("not an email", "a guess"),
    ):
        before = (hasher.hashed, hasher.verified)
        result = await store.verify_password(who, pw)
        counts.append((hasher.hashed - before[0], hasher.verified - before[1]))
        assert (result == acct) == (pw == "long enough pw")
    assert counts == [(0, 1)] * 4  # one verify each, never a hash instead
    assert threading.get_ident() not in hasher.threads  # never on the event loop's thread
    assert hasher.nice == {min(19, os.getpriority(os.PRIO_PROCESS, 0) + HASH_NICE)}  # yields


@pytest.mark.slow
async def test_at_most_the_configured_threads_hash_at_once(redis: Redis, prefix: str) -> None:
    hasher = WatchedHasher(delay_s=0.05)
    store = Store(redis, prefix=prefix, hasher=hasher, hash_threads=2, hash_wait_s=30)
    await store.verify_password("warm@example.com", "x" * 10)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(store.verify_password(new_email(), "guess") for _ in range(12)))
    tick.cancel()
    assert hasher.most == 2
    assert ticks >= 20  # the loop kept running while 12 verifications took >= 0.3 s


@pytest.mark.slow
async def test_a_full_pool_answers_busy_instead_of_queueing_forever(
    redis: Redis, prefix: str
) -> None:
    hasher = WatchedHasher(delay_s=0.3)
    store = Store(redis, prefix=prefix, hasher=hasher, hash_threads=1, hash_wait_s=0.05)
    await store.verify_password("warm@example.com", "x" * 10)
    results: list[Any] = await asyncio.gather(
        *(store.verify_password(new_email(), "guess") for _ in range(3)), return_exceptions=True
    )
    assert results.count(None) == 1
    assert sum(isinstance(r, Busy) for r in results) == 2


@pytest.mark.slow
async def test_a_cancelled_log_in_keeps_its_slot_until_argon2_is_done(
    redis: Redis, prefix: str
) -> None:
    hasher = WatchedHasher(delay_s=0.3)
    store = Store(redis, prefix=prefix, hasher=hasher, hash_threads=1, hash_wait_s=5)
    await store.verify_password("warm@example.com", "x" * 10)
    hasher.started.clear()
    first = asyncio.create_task(store.verify_password(new_email(), "guess"))
    assert await asyncio.to_thread(hasher.started.wait, 10)
    first.cancel()  # the client went away; its argon2 run cannot be stopped
    with pytest.raises(asyncio.CancelledError):
        await first
    await store.verify_password(new_email(), "guess")
    assert hasher.most == 1  # the second waited for the first thread to finish
