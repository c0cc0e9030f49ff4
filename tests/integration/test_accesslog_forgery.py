"""Access-log forgery: a request must never write a second (fake) access line.

Before: ``GET /dashboard/x%0a... status=200 key_id=admin`` was logged with the
decoded newline, so the log held a complete forged line. Every field is now
escaped (``gateway.ops.accesslog.escape``). The integration test sends the raw
request through the real app and ``GatewayRunner``; under gunicorn the same
logger runs (and now actually writes: it used to write nothing there).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.demo.mocknode import MockNode
from gateway.ops.accesslog import escape, redacted_path
from gateway.redis.embedded import free_port
from gateway.server.listener import GatewayRunner
from tests.helpers.config import MakeConfig, scenario

HOST = "127.0.0.1"
CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
FORGED = "2026-01-01 00:00:00,000 INFO gateway.access access remote=1.2.3.4 status=200"


@pytest.mark.parametrize(
    ("raw", "logged"),
    [
        ("/bsc", "/bsc"),
        ("eth_call", "eth_call"),
        ("a\nb", "a\\x0ab"),
        ("a\r\nb", "a\\x0d\\x0ab"),
        ("x key_id=forged", "x\\x20key_id=forged"),
        ("back\\slash", "back\\x5cslash"),
        ("tab\there", "tab\\x09here"),
        ("del\x7f", "del\\x7f"),
        ("nel\x85", "nel\\x85"),
        ("ls\u2028ps\u2029", "ls\\u2028ps\\u2029"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        ("/dashboard/ключи", "/dashboard/ключи"),  # printable text stays readable
        ("\U000e0041tag", "\\U000e0041tag"),
    ],
)
def test_escape(raw: str, logged: str) -> None:
    assert escape(raw) == logged
    assert "\n" not in escape(raw) and "\r" not in escape(raw)


def test_escape_keeps_common_tokens_as_they_are() -> None:
    for token in ("/bsc/***", "eth_getLogs", "key_abc123", "127.0.0.1", "::1", "-"):
        assert escape(token) is token  # no copy on the hot path


def test_redacted_dashboard_path_is_escaped() -> None:
    assert escape(redacted_path("/dashboard/x\nINFO forged")) == "/dashboard/x\\x0aINFO\\x20forged"


async def test_newline_in_path_writes_one_escaped_line(
    make_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    handler_lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            handler_lines.append(self.format(record))

    capture = Capture()
    capture.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("gateway.access").addHandler(capture)
    runner = GatewayRunner(create_app(make_config({"server": {"metrics_listen": ""}})))
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, 0).start()
        port = runner.addresses[0][1]
        path = "/dashboard/x%0a" + FORGED.replace(" ", "%20") + "%0d%0a"
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        await reader.read()
        writer.close()
    finally:
        await runner.cleanup()
        logging.getLogger("gateway.access").removeHandler(capture)
    assert len(handler_lines) == 1, handler_lines
    (line,) = handler_lines
    assert "\n" not in line and "\r" not in line
    assert "path=/dashboard/x\\x0a2026-01-01\\x2000:00:00,000\\x20INFO" in line
    assert line.count(" status=") == 1


def _has_control_socket(gunicorn: str) -> bool:
    """Whether this gunicorn has a control socket (and so ``--no-control-socket``)."""
    help_text = subprocess.run(
        [gunicorn, "--help"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    return "--no-control-socket" in help_text


def _gunicorn(entry: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    cmd = [gunicorn, entry, "--worker-class", "aiohttp.GunicornUVLoopWebWorker"]
    cmd += ["--workers", "2", "--bind", f"{HOST}:{port}"]
    if _has_control_socket(gunicorn):  # newer gunicorns share one control socket path
        cmd.append("--no-control-socket")
    if entry.endswith(":create_app()"):  # gunicorn's runner: its access log, our format
        cmd += ["--access-logfile", "-"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=out)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["gateway.server:gunicorn_app", "gateway.app:create_app()"])
async def test_gunicorn_access_lines_and_metrics_port(
    entry: str,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    mock_nodes: dict[str, MockNode],
    api_key: str,
) -> None:
    """Under gunicorn (``gateway.server:gunicorn_app``) there used to be no access log.

    Both gunicorn entries keep ``/metrics`` off the public port and serve it,
    merged over the workers, on ``server.metrics_listen``.
    """
    pytest.importorskip("gunicorn")
    port, metrics_port = free_port(), free_port()
    cfg = tmp_path / "gw.toml"
    cfg.write_text(
        scenario(
            "gunicorn_metrics",
            prefix=prefix,
            bsc=mock_nodes["bsc"].url,
            opbnb=mock_nodes["opbnb"].url,
            metrics=f"{HOST}:{metrics_port}",
        )
    )
    (tmp_path / "prom").mkdir()
    env = {
        **os.environ,
        "GATEWAY_CONFIG": str(cfg),
        "GATEWAY_REDIS_URL": redis_url,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom"),
    }
    env.pop("GATEWAY_LOG_LEVEL", None)
    log = tmp_path / "gunicorn.log"
    proc = _gunicorn(entry, port, env, log)
    try:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True)
        ) as session:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    async with session.get(f"http://{HOST}:{port}/healthz") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
            for _ in range(3):
                async with session.post(
                    f"http://{HOST}:{port}/bsc/{api_key}",
                    data=CALL,
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    assert resp.status == 200
            async with session.get(f"http://{HOST}:{port}/metrics") as resp:
                assert resp.status == 404
            deadline = time.monotonic() + 30
            while True:  # both workers booted (a SIGTERM before that is lost by gunicorn)
                output = log.read_text()
                if "metrics on" in output and "is in use" in output:
                    break
                assert time.monotonic() < deadline, output
                await asyncio.sleep(0.1)
            deadline = time.monotonic() + 10
            while True:  # one worker holds the metrics port; it reports both
                try:
                    async with session.get(f"http://{HOST}:{metrics_port}/metrics") as resp:
                        text = await resp.text()
                        break
                except aiohttp.ClientError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while True:  # asynchronously: the mock nodes live on this event loop
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(log.read_text()[-3000:])
            await asyncio.sleep(0.05)
    output = log.read_text()
    rpc_lines = [
        line for line in output.splitlines() if "access remote=" in line and "path=/bsc/***" in line
    ]
    assert len(rpc_lines) == 3, output[-3000:]
    assert all("status=200" in line and "key_id=key_" in line for line in rpc_lines)
    assert api_key not in output
    assert 'gateway_requests_total{method="eth_chainId",network="bsc",status="200"} 3.0' in text
