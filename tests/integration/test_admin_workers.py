"""The admin API through ``gateway serve --workers 2``: the supervisor's listener.

The supervisor holds no pools and no Redis client: it relays ``/admin/*``
to a worker's unix socket and answers ``POST /admin/reload`` itself (the
config checked whole, then reloaded as SIGHUP does). A cordon made there
reaches every worker: calls on fresh connections (spread over both workers
by the kernel) stop reaching the node; the time the last call still did is
printed.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from gateway.redis.embedded import free_port
from tests.helpers.admin import Tokens, admin_tokens
from tests.helpers.config import scenario
from tests.helpers.waiting import eventually

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
READ = b'{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x%s","latest"]}' % (
    b"11" * 20
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def _workers(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _toml(prefix: str, bsc: list[str], opbnb: str, metrics: int, tokens: Tokens) -> str:
    text = scenario("unlimited", prefix=prefix, bsc=bsc[0], opbnb=opbnb)
    names = ", ".join(f'{{ url = "{u}", name = "node-{i}" }}' for i, u in enumerate(bsc))
    text = text.replace(f'upstreams = ["{bsc[0]}"]', f"upstreams = [{names}]")
    text += f'metrics_listen = "{HOST}:{metrics}"\n'
    for t in tokens.table()["tokens"]:
        text += f'\n[[admin.tokens]]\nname = "{t["name"]}"\nsha256 = "{t["sha256"]}"\n'
        text += f'role = "{t["role"]}"\n'
    return text


def _applied(gw: Served) -> list[float]:
    """When each worker logged applying a cordon (its log line's own clock, ms)."""
    stamps = []
    for line in gw.output().splitlines():
        if "node cordoned network=bsc node=node-0" in line:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            stamps.append(stamp.timestamp())
    return stamps


def _popen(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=out)


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, metrics: int, log: Path) -> None:
        self.proc, self.port, self.metrics, self.log = proc, port, metrics, log

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class SteadyLoad:
    """Four keep-alive clients (as dapps' clients keep their connections), each
    sending ``body`` every 50 ms until the block ends: what was answered and lost."""

    def __init__(self, url: str, body: bytes) -> None:
        self.url, self.body = url, body
        self.answered = 0
        self.failed: list[str] = []
        self._stop = False
        self._clients: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> SteadyLoad:
        self._clients = [asyncio.create_task(self._client()) for _ in range(4)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop = True
        await asyncio.gather(*self._clients)

    async def _client(self) -> None:
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            while not self._stop:
                try:
                    async with session.post(self.url, data=self.body, headers=headers) as resp:
                        await resp.read()
                        if resp.status == 200:
                            self.answered += 1
                        else:
                            self.failed.append(f"HTTP {resp.status}")
                except aiohttp.ClientError as exc:
                    self.failed.append(repr(exc))
                await asyncio.sleep(0.05)


@pytest.fixture
async def extra_node() -> AsyncIterator[MockNode]:
    node = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
    yield node
    await node.close()


@pytest.fixture
async def served(
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    mock_nodes: dict[str, MockNode],
    extra_node: MockNode,
) -> AsyncIterator[tuple[Served, Tokens, Path]]:
    tokens = admin_tokens()
    port, metrics = free_port(), free_port()
    cfg = tmp_path / "gw.toml"
    bsc = [mock_nodes["bsc"].url, extra_node.url]
    cfg.write_text(_toml(prefix, bsc, mock_nodes["opbnb"].url, metrics, tokens))
    log = tmp_path / "gw.log"
    env = {
        **os.environ,
        "GATEWAY_CONFIG": str(cfg),
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_LOG_LEVEL": "INFO",  # each worker logs when it applies a cordon
    }
    cmd = [sys.executable, "-m", "gateway", "serve", "--host", HOST, "--port", str(port)]
    proc = _popen([*cmd, "--workers", "2"], env, log)
    gw = Served(proc, port, metrics, log)
    try:
        await eventually(lambda: "workers on http://" in gw.output() or proc.poll() is not None, 30)
        assert proc.poll() is None, gw.output()
        yield gw, tokens, cfg
    finally:
        workers = _workers(proc.pid)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pid in workers & _workers(proc.pid):
            os.kill(pid, signal.SIGKILL)


async def _admin(
    session: aiohttp.ClientSession, gw: Served, method: str, path: str, token: str | None
) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    url = f"http://{HOST}:{gw.metrics}/admin{path}"
    async with session.request(method, url, headers=headers) as resp:
        return resp.status, await resp.json()


async def _node_of_call(session: aiohttp.ClientSession, gw: Served, key: str) -> str:
    headers = {"Content-Type": "application/json"}
    async with session.post(f"http://{HOST}:{gw.port}/bsc/{key}", data=CALL, headers=headers) as r:
        await r.read()
        assert r.status == 200
        return r.headers["X-Gateway-Node"]


async def test_admin_api_through_the_supervisor(
    served: tuple[Served, Tokens, Path], api_key: str
) -> None:
    gw, tokens, cfg = served
    fresh = aiohttp.TCPConnector(force_close=True)  # each call a new connection: both workers
    async with aiohttp.ClientSession(connector=fresh) as session:
        status, body = await _admin(session, gw, "GET", "/nodes", None)
        assert status == 401 and "error" in body

        async def relayed() -> bool:  # 503 until a worker's socket listens
            status, _ = await _admin(session, gw, "GET", "/nodes", tokens.read)
            return status == 200

        await eventually(relayed, 20, "a worker to answer the admin API")
        status, body = await _admin(session, gw, "GET", "/nodes", tokens.read)
        assert status == 200
        names = [n["name"] for n in body["networks"][0]["nodes"]]
        assert names == ["node-0", "node-1"]

        status, body = await _admin(session, gw, "POST", "/nodes/bsc/node-0/cordon", tokens.read)
        assert status == 403
        sent = time.time()
        status, body = await _admin(session, gw, "POST", "/nodes/bsc/node-0/cordon", tokens.write)
        cordoned_at = time.monotonic()
        assert status == 200 and body["cordoned"]["by"] == "ops-write"
        await eventually(lambda: len(_applied(gw)) == 2, 1.0, "both workers to apply the cordon")
        delays = ", ".join(f"{(t - sent) * 1000:.0f} ms" for t in _applied(gw))
        print(f"\nADMIN cordon applied by each worker (log time - request sent): {delays}")
        last_hit: float | None = None
        calls = 0
        while time.monotonic() - cordoned_at < 1.5:
            started = time.monotonic() - cordoned_at
            if await _node_of_call(session, gw, api_key) == "node-0":
                last_hit = started
            calls += 1
        shown = "none" if last_hit is None else f"{last_hit * 1000:.1f} ms after the answer"
        print(
            f"\nADMIN cordon via supervisor: {calls} calls in 1.5 s on fresh connections; "
            f"the last one served by the cordoned node: {shown}"
        )
        assert last_hit is None or last_hit < 1.0

        status, body = await _admin(session, gw, "POST", "/reload", tokens.read)
        assert status == 403
        good = cfg.read_text()
        cfg.write_text(good + "\n[hedge]\nfloor_s = -1\nnot_a_setting = 2\n")
        old = _workers(gw.proc.pid)
        status, body = await _admin(session, gw, "POST", "/reload", tokens.write)
        assert status == 400 and body["applied"] is False
        assert any(e.startswith("hedge.not_a_setting") for e in body["errors"])
        assert any(e.startswith("hedge.floor_s") for e in body["errors"])
        assert _workers(gw.proc.pid) == old  # nothing applied
        cfg.write_text(good.replace("probe_interval_s = 0.5", "probe_interval_s = 0.4"))
        status, body = await _admin(session, gw, "POST", "/reload", tokens.write)
        assert status == 200 and body["applied"] is True
        assert body["changed"] == ["upstream.probe_interval_s"]
        await eventually(
            lambda: len(_workers(gw.proc.pid) - old) == 2 and not _workers(gw.proc.pid) & old,
            40,
            "the new workers to replace the old ones",
        )
        assert await _node_of_call(session, gw, api_key) == "node-1"  # still cordoned

        async def audited() -> bool:
            status, body = await _admin(session, gw, "GET", "/audit?limit=10", tokens.read)
            return status == 200 and len(body["entries"]) >= 4

        await eventually(audited, 20, "the audit log through a new worker")
        status, body = await _admin(session, gw, "GET", "/audit?limit=10", tokens.read)
        got = [(e["who"], e["action"], e["status"]) for e in body["entries"]]
        assert ("ops-write", "reload", 200) in got and ("ops-write", "reload", 400) in got
        assert ("ops-write", "cordon", 200) in got
    assert "Traceback" not in gw.output()


async def test_reload_in_a_single_process_applies_it_in_place_under_load(
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    mock_nodes: dict[str, MockNode],
    extra_node: MockNode,
    api_key: str,
) -> None:
    """``gateway serve`` without workers: a bad config is refused whole (nothing
    applied); a good one that points bsc at another node is applied in place (a
    new app listens beside the old, which drains) while four keep-alive clients
    call steadily: every call answered, and the calls after it reach the new node."""
    tokens = admin_tokens()
    port, metrics = free_port(), free_port()
    cfg = tmp_path / "one.toml"
    good = _toml(prefix, [mock_nodes["bsc"].url], mock_nodes["opbnb"].url, metrics, tokens)
    cfg.write_text(good)
    log = tmp_path / "one.log"
    env = {**os.environ, "GATEWAY_CONFIG": str(cfg), "GATEWAY_REDIS_URL": redis_url}
    cmd = [sys.executable, "-m", "gateway", "serve", "--host", HOST, "--port", str(port)]
    proc = _popen(cmd, env, log)
    gw = Served(proc, port, metrics, log)
    try:
        async with aiohttp.ClientSession() as session:

            async def up() -> bool:
                try:
                    status, _ = await _admin(session, gw, "GET", "/nodes", tokens.read)
                except aiohttp.ClientError:
                    return False
                return status == 200

            await eventually(up, 30, "the admin API of a single process")
            cfg.write_text(good + "\n[hedge]\nfloor_s = -1\nnot_a_setting = 2\n")
            status, body = await _admin(session, gw, "POST", "/reload", tokens.write)
            assert status == 400 and body["applied"] is False
            assert sorted(e.split(":")[0] for e in body["errors"]) == [
                "hedge.floor_s",
                "hedge.not_a_setting",
            ]
            async with SteadyLoad(f"http://{HOST}:{port}/bsc/{api_key}", READ) as load:
                await asyncio.sleep(1.0)
                before = extra_node.by_method["eth_getBalance"]
                cfg.write_text(good.replace(mock_nodes["bsc"].url, extra_node.url))
                status, body = await _admin(session, gw, "POST", "/reload", tokens.write)
                assert status == 200 and body["ok"] is True and body["applied"] is True, body
                assert "networks.bsc.upstreams" in body["changed"], body["changed"]
                await eventually(
                    lambda: "draining the old app" in gw.output(), 20, "the new app to serve"
                )
                await asyncio.sleep(1.5)  # the old app's notice, then calls on the new one only
            answered, failed = load.answered, load.failed
            print(f"\nADMIN in-place reload under load: {answered} answered, {len(failed)} lost")
            assert answered > 50 and not failed, failed[:5]
            assert extra_node.by_method["eth_getBalance"] > before  # the new node list serves
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in gw.output()


async def test_a_reload_under_steady_load_loses_no_call(
    served: tuple[Served, Tokens, Path], api_key: str
) -> None:
    """Four clients on keep-alive connections, a call every 50 ms each, through a
    ``POST /admin/reload`` that replaces both workers: every call is answered."""
    gw, tokens, cfg = served
    async with aiohttp.ClientSession() as admin:

        async def relayed() -> bool:
            status, _ = await _admin(admin, gw, "GET", "/nodes", tokens.read)
            return status == 200

        await eventually(relayed, 20, "a worker to answer the admin API")
        async with SteadyLoad(f"http://{HOST}:{gw.port}/bsc/{api_key}", CALL) as load:
            await asyncio.sleep(1.0)
            old = _workers(gw.proc.pid)
            text = cfg.read_text()
            cfg.write_text(text.replace("probe_interval_s = 0.5", "probe_interval_s = 0.4"))
            status, body = await _admin(admin, gw, "POST", "/reload", tokens.write)
            assert status == 200 and body["applied"] is True, body
            await eventually(
                lambda: len(_workers(gw.proc.pid) - old) == 2 and not _workers(gw.proc.pid) & old,
                40,
                "the new workers to replace the old ones",
            )
            await asyncio.sleep(1.0)
        answered, failed = load.answered, load.failed
    print(f"\nADMIN reload under load: {answered} calls answered, {len(failed)} lost {failed[:3]}")
    assert answered > 50 and not failed, failed[:5]
