"""``gateway serve --workers N`` as operators run it: real processes, real signals.

The supervisor's promises (gateway/server/workers.py): workers die with it, a worker
killed again and again is restarted with a backoff and never stops the
gateway, SIGHUP reloads the config into fresh workers and drains the old
ones, a busy port is one clear line and a non-zero exit, and no worker's
environment holds the Redis password.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import free_port
from tests.helpers.config import scenario
from tests.helpers.waiting import eventually

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _dead(pid: int) -> bool:
    return not _alive(pid)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _config(path: Path, prefix: str, bsc_url: str, opbnb_url: str, **server: Any) -> Path:
    server = {"metrics_listen": "", **server}
    lines = "".join(f"{k} = {v!r}\n" for k, v in server.items())
    path.write_text(
        scenario("unlimited", prefix=prefix, bsc=bsc_url, opbnb=opbnb_url)
        + "restart_backoff_s = 0.2\nrestart_backoff_max_s = 2.0\n"
        + lines
    )
    return path


def _popen(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=out)


def _proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


class Gateway:
    """One ``gateway serve --workers N`` process and its port."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.base = f"http://{HOST}:{port}"

    def workers(self) -> list[int]:
        return [p for p in _children(self.proc.pid) if _alive(p)]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
async def start(
    tmp_path: Path, redis_url: str, prefix: str, mock_nodes: dict[str, MockNode]
) -> AsyncIterator[Callable[..., Any]]:
    started: list[Gateway] = []

    async def run(workers: int = 2, env: dict[str, str] | None = None, **server: Any) -> Gateway:
        port = free_port()
        cfg = _config(
            tmp_path / f"gw-{port}.toml",
            prefix,
            mock_nodes["bsc"].url,
            mock_nodes["opbnb"].url,
            **server,
        )
        log = tmp_path / f"gw-{port}.log"
        full_env = {
            **os.environ,
            "GATEWAY_CONFIG": str(cfg),
            "GATEWAY_REDIS_URL": redis_url,
            "GATEWAY_LOG_LEVEL": "INFO",
            **(env or {}),
        }
        cmd = [sys.executable, "-m", "gateway", "serve", "--host", HOST, "--port", str(port)]
        proc = _popen([*cmd, "--workers", str(workers)], full_env, log)
        gw = Gateway(proc, port, log)
        started.append(gw)
        await eventually(lambda: "workers on http://" in gw.output() or proc.poll() is not None, 20)
        assert proc.poll() is None, gw.output()
        return gw

    yield run
    for gw in started:
        if gw.proc.poll() is None:
            gw.proc.terminate()
            try:
                gw.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                gw.proc.kill()
                gw.proc.wait()
        for pid in gw.workers():  # never leave a worker behind
            os.kill(pid, signal.SIGKILL)


async def _call(session: aiohttp.ClientSession, gw: Gateway, key: str) -> int:
    try:
        async with session.post(f"{gw.base}/bsc/{key}", data=CALL, headers=JSON) as resp:
            await resp.read()
            return resp.status
    except aiohttp.ClientError:
        return 0


@pytest.fixture
def session_factory() -> Iterator[Callable[[], aiohttp.ClientSession]]:
    def make() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))

    yield make


@pytest.mark.slow
async def test_killed_supervisor_takes_its_workers_along(start: Callable[..., Any]) -> None:
    gw = await start(workers=2)
    workers = gw.workers()
    assert len(workers) == 2
    gw.proc.kill()  # SIGKILL: no chance to pass anything on
    gw.proc.wait()
    await eventually(lambda: not any(_alive(p) for p in workers), 10, "workers to exit")
    with pytest.raises(OSError), socket.create_connection((HOST, gw.port), timeout=1):
        pass  # nobody serves the port any more


@pytest.mark.slow
async def test_workers_killed_again_and_again_are_restarted(
    start: Callable[..., Any], api_key: str, session_factory: Callable[[], aiohttp.ClientSession]
) -> None:
    """The old supervisor gave up after 2N quick deaths; four kill -9 in 8 s stopped it."""
    gw = await start(workers=2)
    healthy = gw.workers()[0]  # left alone: it must keep serving throughout
    killed: list[int] = []
    statuses: list[int] = []
    async with session_factory() as session:
        started = time.monotonic()
        for _ in range(6):  # six kill -9 of the other slot's worker, as fast as it comes back
            await eventually(
                lambda: len(set(gw.workers()) - set(killed) - {healthy}) == 1, 20, "a new worker"
            )
            victim = next(p for p in gw.workers() if p not in killed and p != healthy)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            # Its listening socket is gone once it is a zombie; before that the
            # kernel may still queue a connection on it (SO_REUSEPORT), and lose it.
            await eventually(functools.partial(_dead, victim), 10, "the victim to die")
            status = await _call(session, gw, api_key)  # the healthy one answers
            if status == 0:
                # A connection the kernel had already queued on the killed worker's
                # socket (SO_REUSEPORT) is reset with it, as it would be for any
                # client; the next one must reach the healthy worker.
                status = await _call(session, gw, api_key)
            statuses.append(status)
        elapsed = time.monotonic() - started
        for _ in range(3):  # and both at once, three times
            for pid in gw.workers():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            await asyncio.sleep(0.1)
        await eventually(lambda: len(gw.workers()) == 2, 30, "workers back after kills")
        try:
            await eventually(lambda: gw.output().count("worker exited") >= 7, 10, "restart log")
        except AssertionError:
            raise AssertionError(gw.output()[-4000:]) from None
        deadline = time.monotonic() + 30
        while True:  # the restarted workers start listening
            if await _call(session, gw, api_key) == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        after = [await _call(session, gw, api_key) for _ in range(10)]
    print(f"\nSRV kill-9: kills={len(killed)} one_slot_6_in_s={elapsed:.1f} during={statuses}")
    assert gw.proc.poll() is None, gw.output()
    assert "keep dying" not in gw.output()
    assert after == [200] * 10
    assert statuses == [200] * 6


@pytest.mark.slow
async def test_sighup_reloads_config_into_new_workers(
    start: Callable[..., Any],
    api_key: str,
    mock_nodes: dict[str, MockNode],
    session_factory: Callable[[], aiohttp.ClientSession],
) -> None:
    gw = await start(workers=2)
    old = set(gw.workers())
    async with session_factory() as session:
        assert await _call(session, gw, api_key) == 200
        # New config: bsc now served by another chain-56 node (visible in which node counts).
        other = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
        before = other.by_method.get("eth_chainId", 0)
        text = gw.log.with_suffix(".toml").read_text()
        text = text.replace(mock_nodes["bsc"].url, other.url)
        gw.log.with_suffix(".toml").write_text(text)
        statuses: list[int] = []
        gw.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            statuses.append(await _call(session, gw, api_key))
            current = set(gw.workers())
            if len(current) == 2 and not current & old:
                break
            await asyncio.sleep(0.05)
        new = set(gw.workers())
        await eventually(lambda: not any(_alive(p) for p in old), 20, "old workers to drain")
        for _ in range(5):
            assert await _call(session, gw, api_key) == 200
    print(f"\nSRV sighup: calls_during={len(statuses)} statuses={set(statuses)}")
    assert len(new) == 2 and not new & old
    assert set(statuses) == {200}  # no call refused during the handover
    assert other.by_method.get("eth_chainId", 0) >= before + 5
    await other.close()
    assert gw.proc.poll() is None
    assert "Traceback" not in gw.output()


@pytest.mark.slow
async def test_sighup_with_a_broken_config_keeps_serving(
    start: Callable[..., Any], api_key: str, session_factory: Callable[[], aiohttp.ClientSession]
) -> None:
    gw = await start(workers=2)
    old = set(gw.workers())
    gw.log.with_suffix(".toml").write_text("[server]\nnot_a_setting = 1\n")
    gw.proc.send_signal(signal.SIGHUP)
    await eventually(lambda: "reload failed" in gw.output(), 10, "reload error")
    async with session_factory() as session:
        assert await _call(session, gw, api_key) == 200
    assert set(gw.workers()) == old
    assert "server.not_a_setting" in gw.output()


@pytest.mark.slow
async def test_worker_environment_holds_no_redis_password(
    start: Callable[..., Any],
    redis: Redis,
    redis_url: str,
    api_key: str,
    session_factory: Callable[[], aiohttp.ClientSession],
) -> None:
    """The old supervisor put the whole config, secrets included, in every worker's env."""
    user, password = f"gw{secrets.token_hex(4)}", secrets.token_hex(16)
    await redis.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        channels=["*"],
        commands=["+@all"],
    )
    try:
        secret_url = redis_url.replace("redis://", f"redis://{user}:{password}@", 1)
        gw = await start(workers=2, env={"GATEWAY_REDIS_URL": secret_url})
        async with session_factory() as session:  # the workers did get the password
            assert await _call(session, gw, api_key) == 200
        workers = gw.workers()
        assert len(workers) == 2
        for pid in workers:
            environ = _proc_file(pid, "environ")
            cmdline = _proc_file(pid, "cmdline")
            assert password.encode() not in environ
            assert password.encode() not in cmdline
            assert b"GATEWAY_WORKER_CONFIG" not in environ
            assert b"GATEWAY_REDIS_URL" not in environ
    finally:
        await redis.acl_deluser(user)


@pytest.mark.slow
def test_busy_port_is_one_line_and_exit_1(tmp_path: Path, redis_url: str) -> None:
    """Before: the banner, then a traceback. Now: the port named, no banner, exit 1."""
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**os.environ, "GATEWAY_REDIS_URL": redis_url}
        env.pop("GATEWAY_CONFIG", None)
        for extra in ([], ["--workers", "2"]):
            result = subprocess.run(
                [
                    *(sys.executable, "-m", "gateway", "serve", "--host", HOST),
                    *("--port", str(port), "--metrics-listen", "", *extra),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, (extra, result.stderr)
            assert f"cannot listen on {HOST}:{port}" in result.stderr
            assert "already in use" in result.stderr
            assert "Traceback" not in result.stderr
            assert "Running on" not in result.stdout and "workers on" not in result.stdout


@pytest.mark.slow
async def test_banner_only_once_listening(tmp_path: Path, start: Callable[..., Any]) -> None:
    gw = await start(workers=2)  # the fixture waits for the banner
    with socket.create_connection((HOST, gw.port), timeout=2):
        pass  # when the banner is out, the port answers


def _listeners(port: int) -> set[int]:
    """Pids holding a listening TCP socket on ``port`` (read from /proc, as ``ss -lp`` does)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
    owners = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:
            continue
        if links & inodes:
            owners.add(int(proc.name))
    return owners


async def _requests_counted(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(url) as resp:
        assert resp.status == 200
        text = await resp.text()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gateway_requests_total"
    )


@pytest.mark.slow
async def test_one_metrics_listener_for_every_worker(
    start: Callable[..., Any], api_key: str, session_factory: Callable[[], aiohttp.ClientSession]
) -> None:
    """Before: every worker but one logged "metrics address ... is in use" at start
    (and again after each restart). Now the supervisor holds the one listener and
    serves every worker's samples; a worker's death leaves no gap."""
    metrics_port = free_port()
    gw = await start(workers=3, metrics_listen=f"{HOST}:{metrics_port}")
    url = f"http://{HOST}:{metrics_port}/metrics"
    assert _listeners(metrics_port) == {gw.proc.pid}
    async with session_factory() as session:
        assert [await _call(session, gw, api_key) for _ in range(30)] == [200] * 30
        assert await _requests_counted(session, url) == 30  # merged over the workers
        victim = gw.workers()[0]
        os.kill(victim, signal.SIGKILL)
        await eventually(functools.partial(_dead, victim), 10, "the victim to die")
        assert await _requests_counted(session, url) == 30  # no gap; its counts stay
        await eventually(lambda: len(gw.workers()) == 3, 30, "the worker back")
        async with session.get(f"http://{HOST}:{metrics_port}/bsc") as resp:
            assert resp.status == 404  # nothing but /metrics there
    assert _listeners(metrics_port) == {gw.proc.pid}
    out = gw.output()
    assert "in use" not in out and "unavailable" not in out, out[-3000:]


@pytest.mark.slow
async def test_the_supervisors_listener_serves_the_readyz_details(
    start: Callable[..., Any],
    mock_nodes: dict[str, MockNode],
    session_factory: Callable[[], aiohttp.ClientSession],
) -> None:
    """The public /readyz names no node; with --workers the metrics listener belongs to
    the supervisor (no pools of its own): it serves a worker's detailed report."""
    metrics_port = free_port()
    gw = await start(workers=2, metrics_listen=f"{HOST}:{metrics_port}")
    private = f"http://{HOST}:{metrics_port}"
    async with session_factory() as session:
        seen: dict[str, Any] = {}

        async def detailed() -> bool:
            async with session.get(f"{private}/readyz") as resp:
                seen.update(await resp.json())
                return resp.status == 200

        await eventually(detailed, 20, "a worker's /readyz snapshot")
        assert seen["networks"]["bsc"]["upstreams"][0]["url"] == mock_nodes["bsc"].url
        assert seen["redis"]["address"]
        async with session.get(f"{private}/readyz/bsc") as resp:
            body = await resp.json()
            assert resp.status == 200 and body["upstreams"][0]["url"] == mock_nodes["bsc"].url
        async with session.get(f"{private}/readyz/nosuch") as resp:
            assert resp.status == 404
        async with session.get(f"http://{HOST}:{gw.port}/readyz") as resp:
            text = await resp.text()
            assert resp.status == 200 and mock_nodes["bsc"].url not in text
