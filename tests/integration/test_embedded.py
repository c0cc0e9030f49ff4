"""The embedded Redis is reachable by the gateway's user only.

A review found it on a loopback TCP port without a password, its port in a
world-readable file: any local user ran ``CONFIG SET dir`` + ``SAVE`` and
wrote a file as the gateway's user. Now: a unix socket in a 0700 data dir,
no TCP listener, ``CONFIG``/``DEBUG``/``MODULE`` renamed away, the URL file
0600. These tests start the real redis-server binary and look at the
process's real sockets in ``/proc``.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.redis.embedded import RedisProcess, ensure_embedded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _listening_tcp_ports(pid: int) -> set[int]:
    """TCP ports (v4 and v6) on which process ``pid`` listens, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[Path, str, RedisProcess]]:
    data = tmp_path / "data"
    url, proc = ensure_embedded(data)
    assert proc is not None
    yield data, url, proc
    proc.stop()


def test_unix_socket_in_a_private_dir(started: tuple[Path, str, RedisProcess]) -> None:
    data, url, proc = started
    assert url == f"unix://{data.resolve() / 'redis.sock'}"
    assert _mode(data) == 0o700
    assert _mode(data / "redis.sock") == 0o700
    assert _mode(data / "redis.url") == 0o600
    assert (data / "redis.url").read_text().strip() == url
    assert _mode(data / "appendonly.aof") == 0o600  # umask 077 in the child
    assert proc.proc is not None
    assert _listening_tcp_ports(proc.proc.pid) == set()
    with redis.Redis.from_url(url) as client:
        assert client.info("server")["tcp_port"] == 0


def test_dangerous_commands_are_gone(started: tuple[Path, str, RedisProcess]) -> None:
    _, url, _ = started
    with redis.Redis.from_url(url) as client:
        assert client.ping()
        for command in (
            ("CONFIG", "SET", "dir", "/tmp"),
            ("DEBUG", "SLEEP", "0"),
            ("MODULE", "LIST"),
        ):
            with pytest.raises(redis.ResponseError, match="unknown command"):
                client.execute_command(*command)


def test_loose_data_dir_is_tightened(tmp_path: Path) -> None:
    data = tmp_path / "loose"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    (data / "redis.url").write_text("redis://127.0.0.1:1/0\n")  # an older version's file
    os.chmod(data / "redis.url", 0o644)
    url, proc = ensure_embedded(data)
    assert proc is not None  # the TCP URL was not trusted
    try:
        assert url.startswith("unix://")
        assert _mode(data) == 0o700
        assert _mode(data / "redis.url") == 0o600
        again, other = ensure_embedded(data)  # a second worker / the CLI
        assert (again, other) == (url, None)
    finally:
        proc.stop()


def test_long_data_dir_gets_a_short_private_socket_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with RedisProcess(deep, persist=False) as proc:
        assert proc.socket_path is not None
        assert len(str(proc.socket_path)) < 108
        assert _mode(proc.socket_path.parent) == 0o700
        assert _mode(deep) == 0o700
        with redis.Redis.from_url(proc.url) as client:
            assert client.set("k", "v")
        url = proc.url
        proc.stop()
        proc.start()  # a restart listens where clients already point
        assert proc.url == url
        with redis.Redis.from_url(url) as client:
            assert client.ping()
