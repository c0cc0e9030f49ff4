"""A running gateway for the fuzzer: ``gateway serve --workers 2``, its log, its workers.

The process is started the way an operator starts it (real Redis, mock nodes
as processes), with its log in a file the oracles read: no traceback, at
most one line per refused request, and the same worker processes at the end
as at the start (a crashed worker is replaced by the supervisor, which only
a changed pid shows).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio import Redis

from gateway.redis.embedded import LOOPBACK, free_port
from gateway.store.accounts import Store
from tests.helpers.procs import mock_node_process, stop, wait_ready

# Rate limits no fuzzer reaches; cache and coalescing on (they are doors too).
CONFIG = """
[redis]
prefix = "{prefix}"

[plans.free]
rate = 1000000
burst = 1000000

[networks.bsc]
upstreams = ["{bsc}"]

[networks.opbnb]
upstreams = ["{opbnb}"]

[upstream]
probe_interval_s = 0.5

[server]
access_log = false
metrics_listen = "{metrics}"
"""


@dataclass
class FuzzStack:
    """The gateway under fuzz: where it listens, a key, its log and its workers."""

    port: int
    key: str
    log_path: Path
    master: int  # the supervisor's pid
    workers: frozenset[int]
    _log_at: int = field(default=0)
    requests: int = 0  # sent since start-up
    lines: int = 0  # logged since start-up

    def new_log(self) -> str:
        """What the gateway logged since the last call."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_at)
            data = f.read()
        self._log_at += len(data)
        return data.decode(errors="replace")

    def worker_pids(self) -> frozenset[int]:
        return children(self.master)


def children(pid: int) -> frozenset[int]:
    """The pids whose parent is ``pid`` (Linux /proc; psutil is not a dependency)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.add(int(entry.name))
    return frozenset(out)


async def _make_key(redis_url: str, prefix: str) -> str:
    from argon2 import PasswordHasher

    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        store = Store(
            redis,
            prefix=prefix,
            hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1),
        )
        acct = await store.create_account(f"fuzz-{secrets.token_hex(3)}@example.com", "fuzz pw 12")
        key, _ = await store.create_key(acct.id, name="fuzz")
        return key
    finally:
        await redis.aclose()


@contextmanager
def fuzz_stack(tmp: Path, redis_url: str, *, workers: int = 2) -> Iterator[FuzzStack]:
    prefix = "fz" + secrets.token_hex(4)
    with ExitStack() as stack:
        bsc = stack.enter_context(mock_node_process(56))
        opbnb = stack.enter_context(mock_node_process(204))
        cfg = tmp / "gateway.toml"
        cfg.write_text(
            CONFIG.format(prefix=prefix, bsc=bsc, opbnb=opbnb, metrics=f"{LOOPBACK}:{free_port()}")
        )
        key = asyncio.run(_make_key(redis_url, prefix))
        port = free_port()
        log_path = tmp / "gateway.log"
        env = {**os.environ, "GATEWAY_CONFIG": str(cfg), "GATEWAY_REDIS_URL": redis_url}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "gateway", "serve", "--host", LOOPBACK),
                    *("--port", str(port), "--workers", str(workers)),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        stack.callback(stop, proc)
        wait_ready(port, proc, timeout_s=60)
        gw = FuzzStack(port, key, log_path, proc.pid, frozenset())
        deadline = time.monotonic() + 30
        while b"to quit" not in log_path.read_bytes():  # the banner: start-up is over
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        gw.workers = gw.worker_pids()
        gw.new_log()  # start-up lines are not the fuzzer's
        yield gw
