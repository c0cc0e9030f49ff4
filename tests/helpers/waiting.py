"""Waiting for something that happens on its own time, with one deadline style.

Tests poll real servers and real processes instead of sleeping a guessed
amount: ``eventually`` returns as soon as the check holds and fails with a
message naming what never happened, so a slow machine only makes a test
slower, never flaky, and a broken behaviour fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable

import aiohttp

HOST = "127.0.0.1"

Check = Callable[[], bool] | Callable[[], Awaitable[bool]]


async def eventually(
    check: Check, timeout_s: float = 10.0, what: str = "", interval_s: float = 0.02
) -> None:
    """Poll ``check`` (plain or async) until it is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or check}")
        await asyncio.sleep(interval_s)


async def http_ready(
    port: int,
    proc: subprocess.Popen[bytes] | None = None,
    path: str = "/readyz",
    timeout_s: float = 20.0,
) -> None:
    """Wait until ``GET path`` answers 200; fail at once if ``proc`` has exited."""
    async with aiohttp.ClientSession() as session:

        async def answers() -> bool:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
            try:
                async with session.get(f"http://{HOST}:{port}{path}") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(answers, timeout_s, f"{path} on port {port}", interval_s=0.05)
