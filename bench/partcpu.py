"""CPU of each part of the local stack, read from /proc and Redis ``INFO cpu``.

Why: a throughput figure alone cannot say what limited it.  A snapshot taken
before and after a run gives every process's CPU seconds (each gateway
worker, Redis, each mock node, the baseline proxy) and each CPU's machine-wide
busy time, so the report can name the part at its limit instead of guessing.
On a shared machine the machine-wide figure also shows when *other* tenants'
processes, not ours, took the CPU.  The arithmetic on two snapshots lives in
bench/verdicts.py (no I/O there, so it is unit-tested).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field

from bench.stack import ManagedProcess, Stack, process_tree
from bench.verdicts import parse_commandstats, parse_info_cpu

__all__ = [
    "PartsSnapshot",
    "cpu_busy",
    "pid_cpu_seconds",
    "redis_commandstats",
    "redis_info",
    "redis_info_cpu",
    "snapshot",
]


@dataclass(frozen=True)
class PartsSnapshot:
    """CPU seconds per named part, each part's CPUs, and per-CPU busy/total ticks."""

    cpu_s: dict[str, float] = field(default_factory=dict)
    cpus: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    cpu_ticks: dict[int, tuple[int, int]] = field(default_factory=dict)
    redis_cpu_s: float | None = None


def pid_cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (not its children), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_busy() -> dict[int, tuple[int, int]]:
    """Per CPU: (busy ticks, total ticks) since boot, from /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError), open("/proc/stat") as fh:
        for line in fh:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu":
                continue
            ticks = [int(x) for x in rest.split()]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
            total = sum(ticks[:8])  # guest time is already in user
            out[int(name[3:])] = (total - idle, total)
    return out


async def redis_info(port: int, section: str, host: str = "127.0.0.1") -> str | None:
    """Redis's ``INFO <section>`` text, or None if it does not answer."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"INFO {section}\r\n".encode())
        header = await asyncio.wait_for(reader.readline(), 2.0)
        if not header.startswith(b"$"):
            return None
        body = await asyncio.wait_for(reader.readexactly(int(header[1:]) + 2), 2.0)
        return body.decode(errors="replace")
    except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def redis_info_cpu(port: int, host: str = "127.0.0.1") -> float | None:
    """Redis's own used_cpu_sys + used_cpu_user (s), or None if it does not answer."""
    text = await redis_info(port, "cpu", host)
    return None if text is None else parse_info_cpu(text)


async def redis_commandstats(port: int, host: str = "127.0.0.1") -> dict[str, tuple[int, int]]:
    """Per command run so far: (calls, usec) from ``INFO commandstats``; {} if no answer."""
    text = await redis_info(port, "commandstats", host)
    return {} if text is None else parse_commandstats(text)


def _named(stack: Stack) -> list[tuple[str, ManagedProcess]]:
    parts: list[tuple[str, ManagedProcess]] = []
    if stack.gateway is not None:
        parts.append(("gateway", stack.gateway))
    parts += [(proc.name, proc) for proc in stack.extra]  # a second gateway (door=...)
    if stack.proxy is not None:
        parts.append(("baseline proxy", stack.proxy))
    if stack.redis is not None:
        parts.append(("redis-server", stack.redis))
    for nodes in stack.nodes.values():
        parts += [(node.name, node) for node in nodes]
    return parts


async def snapshot(stack: Stack | None) -> PartsSnapshot:
    """CPU of every live part now; an empty snapshot for a remote target."""
    if stack is None:
        return PartsSnapshot()
    cpu_s: dict[str, float] = {}
    cpus: dict[str, tuple[int, ...] | None] = {}
    for name, proc in _named(stack):
        if not proc.alive:
            continue
        pids = process_tree(proc.pid)
        if len(pids) == 1 or proc is not stack.gateway:
            # one part; a forked helper (Redis's AOF rewrite) counts with its parent
            used = [pid_cpu_seconds(p) for p in pids]
            if used[0] is not None:
                cpu_s[name] = sum(x for x in used if x is not None)
                cpus[name] = proc.cpus
            continue
        # the gateway's supervisor and its workers, workers numbered by pid order
        names = [(f"{name} supervisor", pids[0])]
        names += [(f"{name} worker {i}", p) for i, p in enumerate(sorted(pids[1:]), 1)]
        for part, pid in names:
            value = pid_cpu_seconds(pid)
            if value is not None:
                cpu_s[part] = value
                cpus[part] = proc.cpus
    redis_cpu = None
    if stack.redis is not None and stack.redis.alive:
        redis_cpu = await redis_info_cpu(stack.redis_port)
        if redis_cpu is not None and "redis-server" in cpu_s:
            # INFO counts in microseconds; /proc in clock ticks (10 ms), too
            # coarse for a Redis that leased admission keeps nearly idle
            cpu_s["redis-server"] = redis_cpu
    return PartsSnapshot(cpu_s, cpus, cpu_busy(), redis_cpu)
