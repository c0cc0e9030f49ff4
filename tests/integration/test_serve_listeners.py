"""Listeners of one process: the unread-answer timeout and the ``/metrics`` port.

Real app, real ``GatewayRunner`` on port 0, raw sockets for the client that
never reads (an HTTP library would read for us).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import Config, ConfigError, config_from_dict
from gateway.ops.metricsport import MetricsListener, SupervisorMetricsListener
from gateway.redis.embedded import free_port
from gateway.server.listener import GatewayRunner
from gateway.telemetry.metrics import METRICS, Metrics
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401  (both doors)

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
JSON = {"Content-Type": "application/json"}
CHUNK = b"x" * 65536


@asynccontextmanager
async def serving(
    cfg: Config, chunks: int = 0
) -> AsyncIterator[tuple[GatewayRunner, int, asyncio.Future[str]]]:
    """The real app plus ``GET /big``: ``chunks`` x 64 KiB; the future says how it ended."""
    app = create_app(cfg)
    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        resp.content_length = chunks * len(CHUNK)
        await resp.prepare(request)
        try:
            for _ in range(chunks):
                await resp.write(CHUNK)
        except ConnectionError as exc:
            ended.set_result(type(exc).__name__)
            raise
        ended.set_result("complete")
        return resp

    app.router.add_get("/big", big)
    runner = GatewayRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, 0).start()
        yield runner, int(runner.addresses[0][1]), ended
    finally:
        await runner.cleanup()


def _raw_client(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill up fast
    sock.connect((HOST, port))
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def _cfg(make_config: MakeConfig, **server: Any) -> Config:
    cfg: Config = make_config({"server": {"metrics_listen": f"{HOST}:0", **server}})
    return cfg


@pytest.mark.slow
async def test_unread_answer_drops_the_connection(make_config: MakeConfig) -> None:
    """Before: a client that never reads held the connection and its buffers forever."""
    cfg = _cfg(make_config, write_timeout_s=0.5)
    async with serving(cfg, chunks=2048) as (runner, port, ended):  # 128 MiB answer
        sock = _raw_client(port)
        try:
            started = time.monotonic()
            outcome = await asyncio.wait_for(asyncio.shield(ended), 10)
            took = time.monotonic() - started
            async with asyncio.timeout(5):
                while True:
                    if not runner.watch.connections:
                        break
                    await asyncio.sleep(0.01)
            sock.setblocking(False)
            received, reset = 0, False
            while True:
                try:
                    data = await asyncio.get_running_loop().sock_recv(sock, 1 << 20)
                except ConnectionResetError:
                    reset = True
                    break
                if not data:
                    break
                received += len(data)
        finally:
            sock.close()
        text = await _scrape(runner)
    print(f"\nSRV write-timeout: aborted_after_s={took:.2f} client_got={received} reset={reset}")
    assert outcome != "complete"
    assert took < 5
    assert received < 2048 * len(CHUNK) // 4
    assert _sample(text, "gateway_client_timeouts_total", phase="write") == 1


@pytest.mark.slow
async def test_a_slow_reader_that_keeps_reading_is_not_cut(make_config: MakeConfig) -> None:
    cfg = _cfg(make_config, write_timeout_s=1.0)
    async with serving(cfg, chunks=64) as (_, port, ended):  # 4 MiB read in 512 KiB sips
        sock = _raw_client(port)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        received = 0
        try:
            async with asyncio.timeout(30):
                while not ended.done() or received < 64 * len(CHUNK):
                    await asyncio.sleep(0.2)  # pauses well under write_timeout_s
                    taken = 0
                    while taken < 512 * 1024:
                        try:
                            data = sock.recv(1 << 16)
                        except BlockingIOError:
                            break
                        if not data:
                            break
                        taken += len(data)
                    received += taken
                    if taken == 0 and ended.done():
                        data = await loop.sock_recv(sock, 1 << 16)
                        if not data:
                            break
                        received += len(data)
        finally:
            sock.close()
        assert ended.result() == "complete"
    assert received >= 64 * len(CHUNK)


async def _scrape(runner: GatewayRunner) -> str:
    assert runner.metrics_listener is not None
    port = runner.metrics_listener.port
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{HOST}:{port}/metrics") as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()


def _sample(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_metrics_on_their_own_listener_not_the_public_port(
    make_config: MakeConfig, api_key: str
) -> None:
    async with (
        serving(_cfg(make_config)) as (runner, port, _),
        aiohttp.ClientSession() as session,
    ):
        async with session.post(f"http://{HOST}:{port}/bsc/{api_key}", data=CALL, headers=JSON):
            pass
        async with session.get(f"http://{HOST}:{port}/metrics") as resp:
            assert resp.status == 404  # public port: no Prometheus text
            assert b"gateway_requests" not in await resp.read()
        text = await _scrape(runner)
        assert _sample(text, "gateway_requests_total", network="bsc", status="200") == 1
        assert runner.metrics_listener is not None
        metrics_port = runner.metrics_listener.port
        async with session.post(
            f"http://{HOST}:{metrics_port}/bsc/{api_key}", data=CALL, headers=JSON
        ) as resp:
            assert resp.status in (404, 405)  # and no RPC on the metrics port


async def test_one_holder_at_a_time_and_another_takes_over() -> None:
    """Workers and gunicorn processes contend; a released address is picked up."""
    address = f"{HOST}:{free_port()}"
    first = MetricsListener(Metrics(), address, retry_s=0.05)
    second = MetricsListener(Metrics(), address, retry_s=0.05)
    await first.start()
    await second.start()
    try:
        assert first.port is not None and second.port is None
        await first.close()
        async with asyncio.timeout(5):
            while True:
                if second.port is not None:
                    break
                await asyncio.sleep(0.02)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{address}/metrics") as resp,
        ):
            assert resp.status == 200
    finally:
        await second.close()


def test_supervisor_listener_warns_once_for_a_foreign_holder_then_binds(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve --workers``: a port someone else holds is one warning, not one per tick."""
    holder = socket.socket()
    holder.bind((HOST, 0))
    holder.listen()
    port = holder.getsockname()[1]
    listener = SupervisorMetricsListener(f"{HOST}:{port}", str(tmp_path), retry_s=0.0)
    try:
        with caplog.at_level("WARNING", logger="gateway.metrics"):
            for tick in range(5):
                listener.poll(now=float(tick))
        assert listener.port is None
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and f"{HOST}:{port}" in warnings[0].getMessage()
        holder.close()
        listener.poll(now=10.0)
        assert listener.port == port
        with socket.create_connection((HOST, port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200") and b"text/plain" in answer
    finally:
        holder.close()
        listener.close()


async def test_empty_metrics_listen_opens_nothing(make_config: MakeConfig) -> None:
    app = create_app(make_config({"server": {"metrics_listen": ""}}))
    runner = GatewayRunner(app)
    assert runner.metrics_listener is None
    assert METRICS in app


@pytest.mark.parametrize("bad", ["9464", "host:", ":80", "h:99999", "h:x"])
def test_bad_metrics_listen_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.metrics_listen"):
        config_from_dict({"server": {"metrics_listen": bad}})


def test_metrics_listen_accepts_ipv6() -> None:
    cfg = config_from_dict({"server": {"metrics_listen": "[::1]:9464"}})
    assert cfg.server.metrics_listen == "[::1]:9464"
