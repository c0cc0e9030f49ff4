"""The one loop behind every per-process sum that is written to Redis periodically.

Usage counters, upstream error counts and request insight are added up in
memory and flushed once per interval; on shutdown
(the app's cleanup cancels the task) one last flush runs, so SIGTERM loses
nothing.

Why not a bare ``while True: sleep; flush`` loop: a cancellation that lands
while redis-py is inside a command can be swallowed there (the connection
is dropped and the command returns or raises an ordinary error), after
which such a loop sleeps again forever and the worker never finishes its
shutdown. That hung gunicorn workers in ``test_gunicorn_worker``; checking
``Task.cancelling()`` after every flush ends the loop either way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


def cancelling() -> bool:
    """Whether the running task is being cancelled, even where redis-py swallowed the
    cancellation: every background loop that talks to Redis tests this, not ``True``."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def flush_every(interval_s: float, flush: Callable[[], Awaitable[object]]) -> None:
    """Run ``flush()`` every ``interval_s`` until cancelled, then once more."""
    task = asyncio.current_task()
    try:
        while True:
            await asyncio.sleep(interval_s)
            await flush()
            if task is not None and task.cancelling():
                return
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(flush())
