"""A background task for the life of a cleanup context.

Every long-running loop of the app (usage flushes, the lease give-back, the
alert evaluator, the worker's /readyz snapshot, ...) starts with its cleanup
context and must be cancelled and awaited when that context ends, or a
shutdown leaves a task behind. This is the one place that does it; it imports
nothing of the gateway, so every package may use it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """Run ``work`` as a task named ``name`` until the block ends; then cancel it and
    wait for it to finish."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
