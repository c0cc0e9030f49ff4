"""Password hashing (argon2) in a small, bounded, low-priority thread pool.

argon2 takes ~100 ms of CPU and 64 MiB per hash: running it on the event loop
would stall every RPC call, and running it unbounded would let a log-in flood
take every core. The accounts and security code hash through here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from argon2.exceptions import InvalidHashError, VerificationError

from gateway.store.core import Busy, StoreCore

_T = TypeVar("_T")
HASH_NICE = 10  # password hashing threads run this much nicer than the process (Linux)


class Passwords(StoreCore):
    """Hash and verify passwords off the event loop, at most ``hash_threads`` at once."""

    async def _hash_work(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run argon2 work ``fn(*args)`` in a thread, at most ``hash_threads`` at once.

        The slot is given back by the thread when the work is done, not when
        the awaiting request goes away: a client that disconnects mid-hash
        cannot make room for more parallel hashes than configured.
        """
        try:
            async with asyncio.timeout(self._hash_wait_s):
                await self._hash_slots.acquire()
        except TimeoutError:
            raise Busy("too many log-ins at once; try again in a few seconds") from None
        loop = asyncio.get_running_loop()
        slots = self._hash_slots

        def job() -> _T:
            try:
                return fn(*args)
            finally:
                # RuntimeError: the loop closed meanwhile (nothing waits any more)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(slots.release)

        if self._hash_pool is None:
            # Idle workers exit once the Store (and so this pool) is collected.
            self._hash_pool = ThreadPoolExecutor(
                self._hash_threads, thread_name_prefix="argon2", initializer=_lower_priority
            )
        return await asyncio.shield(loop.run_in_executor(self._hash_pool, job))

    async def hash_password(self, password: str) -> str:
        """An argon2 hash of ``password``, computed in the bounded hashing pool."""
        return await self._hash_work(self._hasher.hash, password)

    async def _dummy(self) -> str:
        """A hash with the current parameters, for emails that have no account."""
        if self._dummy_hash is None:
            self._dummy_hash = await self._hash_work(self._hasher.hash, secrets.token_hex(16))
        return self._dummy_hash

    def _verify(self, pw_hash: str, password: str) -> bool:
        try:
            return bool(self._hasher.verify(pw_hash, password))
        except (VerificationError, InvalidHashError):
            return False


def _lower_priority() -> None:
    """Make the calling (hashing) thread yield the CPU to the event loop.

    On Linux ``nice`` is per thread and argon2's own lane threads inherit it;
    elsewhere, or where it is not allowed, hashing simply runs at normal
    priority.
    """
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + HASH_NICE)
        )
