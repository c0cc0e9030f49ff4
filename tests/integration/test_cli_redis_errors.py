"""The CLI against a Redis it cannot use: one line saying what to do, exit 3,
no traceback, no password."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli.storecall import EXIT_REDIS, redis_failure
from gateway.redis.embedded import LOOPBACK, free_port, redis_server_binary
from tests.helpers.config import Cli

SECRET = "s3cret-redis-pw"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real redis-server that wants a password."""
    port = free_port()
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            LOOPBACK,
            "--requirepass",
            SECRET,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path_factory.mktemp("locked")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection((LOOPBACK, port), timeout=0.1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def run_cli(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gateway ...`` as an operator runs it, pointed at ``url``."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text("")
    env = {
        "GATEWAY_REDIS_URL": url,
        "GATEWAY_CONFIG": str(cfg),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == EXIT_REDIS, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("gateway: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in line, line
    assert SECRET not in proc.stderr and "wrong-pw" not in proc.stderr
    return line


def test_refused_connection(tmp_path: Path) -> None:
    port = closed_port()
    proc = run_cli(f"redis://{LOOPBACK}:{port}/0", tmp_path, "keys", "list", "--account", "a@b.co")
    assert_one_line(proc, "cannot connect", f"{LOOPBACK}:{port}", "GATEWAY_REDIS_URL")


@pytest.mark.slow
@pytest.mark.parametrize("auth", ["", ":wrong-pw@", "someone:wrong-pw@"])
def test_password_refused(locked_redis: int, tmp_path: Path, auth: str) -> None:
    url = f"redis://{auth}{LOOPBACK}:{locked_redis}"
    proc = run_cli(url, tmp_path, "keys", "list", "--account", "a@b.co")
    assert_one_line(proc, "refused our credentials", "redis.url")


def test_right_password_works(locked_redis: int, tmp_path: Path) -> None:
    url = f"redis://:{SECRET}@{LOOPBACK}:{locked_redis}"
    proc = run_cli(url, tmp_path, "keys", "list", "--account", "ghost@example.com")
    assert proc.returncode == 1 and "no account" in proc.stderr  # reached Redis


def test_in_process_too(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_REDIS_URL", f"redis://:{SECRET}@{LOOPBACK}:{closed_port()}")
    code, out, err = cli("accounts", "create", "x@example.com", stdin="long password\n")
    assert code == EXIT_REDIS and out == "" and len(err.strip().splitlines()) == 1
    assert "cannot connect" in err and SECRET not in err


def test_messages_never_show_credentials() -> None:
    from redis.exceptions import AuthenticationError

    text = redis_failure(AuthenticationError("WRONGPASS x"), "rediss://u:pw@[::1]:7000/2")
    assert "pw" not in text.replace("password", "") and "rediss://[::1]:7000/2" in text
    text = redis_failure(ConnectionRefusedError(111, "refused\nline"), "unix://:pw@/run/r.sock")
    assert "unix:///run/r.sock" in text and "\n" not in text and "pw@" not in text
