"""Processes for the scale-out tests, started the way an operator starts them.

``gateway serve`` replicas and ``python -m bench.mocknode`` nodes, each a
real child process on a free loopback port, stopped (SIGTERM, then wait) on
the way out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from gateway.redis.embedded import LOOPBACK, free_port


def wait_ready(
    port: int, proc: subprocess.Popen[bytes], path: str = "/readyz", timeout_s: float = 20.0
) -> None:
    """Poll ``path`` until it answers 200, the process dies, or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=0.5):
                return
        except (OSError, urllib.error.URLError):
            time.sleep(0.05)
    raise RuntimeError(f"process for port {port} did not become ready")


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM (the gateway drains), then wait; SIGKILL only if it hangs."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # pragma: no cover - a stuck drain
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@contextmanager
def mock_node_process(chain_id: int) -> Iterator[str]:
    """``python -m bench.mocknode --chain-id N --port 0``; yields its URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.mocknode",
            "--chain-id",
            str(chain_id),
            "--host",
            LOOPBACK,
            "--port",
            "0",
            "--block-time",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"mock node printed {url!r} instead of its URL")
        yield url
    finally:
        stop(proc)


@contextmanager
def gateway_processes(
    count: int, config: Path, env: Mapping[str, str], metrics_ports: list[int] | None = None
) -> Iterator[list[int]]:
    """``count`` processes of ``gateway serve --port P`` sharing ``config``; yields their ports.

    Each gets its own ``--metrics-listen`` port, appended to ``metrics_ports`` when given.
    """
    full_env = {**os.environ, "GATEWAY_CONFIG": str(config), **env}
    with ExitStack() as stack:
        ports = [free_port() for _ in range(count)]
        procs = []
        for port in ports:
            metrics_port = free_port()
            if metrics_ports is not None:
                metrics_ports.append(metrics_port)
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "gateway", "serve", "--host", LOOPBACK),
                    *("--port", str(port), "--metrics-listen", f"{LOOPBACK}:{metrics_port}"),
                ],
                env=full_env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            stack.callback(stop, proc)
            procs.append(proc)
        for port, proc in zip(ports, procs, strict=True):
            wait_ready(port, proc)
        yield ports
