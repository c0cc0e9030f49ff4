"""The local stack's processes: each part a child process that can be pinned to a
CPU, timed (CPU seconds of its whole tree), stopped, killed or restarted by the
fault scenarios. ``bench.stack.Stack`` starts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment, with this checkout importable (``python -m bench.*``)."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.update(extra or {})
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the server under test gets and which the rest get."""

    server: tuple[int, ...] | None
    others: tuple[int, ...] | None

    def describe(self) -> str:
        if self.server is None:
            return "not pinned"
        others = _cpus(self.others or ())
        return f"server on CPU {_cpus(self.server)}; redis, nodes, load generator on CPU {others}"


def _cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus))


def cpu_plan(pin: bool = True) -> CpuPlan:
    """Split the CPUs this process may use: first half to the server."""
    if not pin or not hasattr(os, "sched_getaffinity"):
        return CpuPlan(None, None)
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    if len(cpus) < 2:
        return CpuPlan(None, None)
    half = len(cpus) // 2
    return CpuPlan(cpus[:half], cpus[half:])


def _pin(pid: int, cpus: tuple[int, ...] | None) -> None:
    if cpus is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)


def process_tree(pid: int) -> list[int]:
    """``pid`` first, then its descendants (gateway workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds used so far by ``pid`` and its descendants."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


class ManagedProcess:
    """A child process the stack can kill, stop, continue and restart."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cpus: tuple[int, ...] | None = None,
        log: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cpus = cpus
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, *, read_url: bool = False, timeout_s: float = 20.0) -> None:
        """Start; with ``read_url`` wait for the first stdout line (the URL)."""
        stdout: Any
        if read_url:
            stdout = asyncio.subprocess.PIPE
        elif self.log is not None:
            stdout = self.log.open("ab")
        else:
            stdout = asyncio.subprocess.DEVNULL
        stderr: Any = self.log.open("ab") if self.log is not None else asyncio.subprocess.DEVNULL
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=self.env or child_env(),
                start_new_session=True,
            )
        finally:
            for fh in (stdout, stderr):
                if hasattr(fh, "close"):
                    fh.close()
        _pin(self.proc.pid, self.cpus)
        if read_url:
            assert self.proc.stdout is not None
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
            except TimeoutError:
                await self.kill()
                raise RuntimeError(
                    f"{self.name}: no URL printed within {timeout_s:.0f} s"
                ) from None
            self.url = line.decode().strip()
            if not self.url.startswith("http"):
                await self.kill()
                raise RuntimeError(f"{self.name} failed to start: {self.tail()}")

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    async def kill(self) -> None:
        """SIGKILL (a crash), then reap."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (a graceful stop); SIGKILL if it takes longer than ``timeout_s``."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            await self.kill()

    def tail(self, lines: int = 20) -> str:
        if self.log is None or not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid) if self.alive else 0.0
