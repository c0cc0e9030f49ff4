"""Real HAProxy and nginx in front of one gateway, built from the shipped configs.

``deploy/haproxy.cfg`` and ``deploy/nginx.conf`` are rewritten only where a
test must differ from a deployment: loopback ports instead of service names,
a temp prefix for nginx's pid, logs and temp files, and a fixed source
address (``SOURCE``) for the proxy's connections to the gateway. The source
address is what lets a test tell the proxy from the client although both are
on loopback: the gateway trusts ``SOURCE`` only, and the client connects
from 127.0.0.1. Everything that decides X-Forwarded-For is kept as shipped.

``scale`` multiplies the idle timeouts (HAProxy's ``timeout client``,
``server`` and ``tunnel``, nginx's ``proxy_read_timeout`` and
``proxy_send_timeout``) so a test that scales the gateway's heartbeat by the
same factor checks the shipped ratio in seconds instead of hours.

``PROXIES`` parametrizes a test over both (each skipped where its binary is
missing), and ``until_passing`` waits until the proxy passes calls on.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import aiohttp
import pytest

from gateway.redis.embedded import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "127.0.0.2"  # the proxies' address as the gateway sees it


_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def scale_timeouts(cfg: str, names: str, scale: float) -> str:
    """``cfg`` with each ``<name> <duration>`` (name in the regex ``names``) times ``scale``."""

    def scaled(m: re.Match[str]) -> str:
        ms = int(m.group(2)) * _UNIT_MS[m.group(3)]
        return f"{m.group(1)}{max(1, round(ms * scale))}ms"

    return re.sub(rf"\b((?:{names})\s+)(\d+)(ms|s|m|h)\b", scaled, cfg)


def haproxy_config(front: int, stats: int, gateway_port: int, scale: float = 1.0) -> str:
    cfg = (ROOT / "deploy" / "haproxy.cfg").read_text()
    if scale != 1.0:
        cfg = scale_timeouts(cfg, "timeout client|timeout server|timeout tunnel", scale)
    cfg = re.sub(r"resolvers docker\n(    .*\n)+", "", cfg.replace(" resolvers docker", ""))
    cfg = re.sub(r"    server gateway-[23] .*\n", "", cfg)  # one replica here
    cfg = cfg.replace("gateway-1:8545", f"{LOOPBACK}:{gateway_port} source {SOURCE}")
    cfg = cfg.replace("bind :8545", f"bind {LOOPBACK}:{front}")
    return cfg.replace("bind :8404", f"bind {LOOPBACK}:{stats}")


def nginx_config(front: int, gateway_port: int, prefix: Path, scale: float = 1.0) -> str:
    cfg = (ROOT / "deploy" / "nginx.conf").read_text()
    if scale != 1.0:
        cfg = scale_timeouts(cfg, "proxy_read_timeout|proxy_send_timeout", scale)
    cfg = re.sub(r"\n\s*server gateway-[23]:8545[^\n]*", "", cfg)
    cfg = re.sub(r"gateway-1:8545", f"{LOOPBACK}:{gateway_port}", cfg)
    cfg = cfg.replace("listen 8545;", f"listen {LOOPBACK}:{front};")
    cfg = cfg.replace("worker_processes auto;", "worker_processes 1;")
    if os.geteuid() == 0:  # workers of a root master drop to nobody: the temp files are root's
        cfg = cfg.replace("worker_processes 1;", "worker_processes 1;\nuser root;")
    cfg = re.sub(r"pid [^;]+;", f"pid {prefix / 'nginx.pid'};", cfg)
    cfg = re.sub(r"error_log [^;]+;", f"error_log {prefix / 'error.log'} warn;", cfg)
    cfg = re.sub(r"access_log [^ ]+ ", f"access_log {prefix / 'access.log'} ", cfg)
    temps = "".join(
        f"    {name}_temp_path {prefix / name};\n"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    cfg = cfg.replace("http {\n", "http {\n" + temps, 1)
    return cfg.replace(
        "proxy_pass http://gateways;",
        f"proxy_pass http://gateways;\n            proxy_bind {SOURCE};",
    )


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection((LOOPBACK, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"proxy never listened on {port}: {log.read_text()[-2000:]}")


@contextmanager
def _run(cmd: list[str], port: int, log: Path) -> Iterator[str]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, proc, log)
        yield f"http://{LOOPBACK}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck proxy
            proc.kill()
            proc.wait()


@contextmanager
def haproxy(gateway_port: int, workdir: Path, scale: float = 1.0) -> Iterator[str]:
    """``haproxy -db`` (foreground) on a free port; yields its base URL."""
    front = free_port()
    cfg = workdir / "haproxy.cfg"
    cfg.write_text(haproxy_config(front, free_port(), gateway_port, scale))
    with _run(["haproxy", "-db", "-f", str(cfg)], front, workdir / "haproxy.log") as url:
        yield url


@contextmanager
def nginx(gateway_port: int, workdir: Path, scale: float = 1.0) -> Iterator[str]:
    """nginx in the foreground with everything under ``workdir``; yields its base URL."""
    front = free_port()
    prefix = workdir / "nginx"
    prefix.mkdir()
    cfg = prefix / "nginx.conf"
    cfg.write_text(nginx_config(front, gateway_port, prefix, scale))
    cmd = ["nginx", "-p", str(prefix), "-c", str(cfg), "-g", "daemon off;"]
    with _run(cmd, front, prefix / "stdout.log") as url:
        yield url


class Proxy(Protocol):
    """``haproxy`` or ``nginx``: run in front of a gateway port, yielding the proxy's URL."""

    def __call__(
        self, gateway_port: int, workdir: Path, scale: float = 1.0
    ) -> AbstractContextManager[str]: ...


PROXIES = [
    pytest.param(
        haproxy,
        id="haproxy",
        marks=pytest.mark.skipif(shutil.which("haproxy") is None, reason="no haproxy"),
    ),
    pytest.param(
        nginx,
        id="nginx",
        marks=pytest.mark.skipif(shutil.which("nginx") is None, reason="no nginx"),
    ),
]


async def until_passing(session: aiohttp.ClientSession, url: str) -> None:
    """Until a call through the proxy reaches the gateway: HAProxy first answers 503,
    until its health check has seen the gateway up."""
    call = {"jsonrpc": "2.0", "id": 0, "method": "eth_chainId", "params": []}
    for _ in range(200):
        async with session.post(url, json=call) as r:
            await r.read()
            if r.status == 200:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("the proxy never passed a call to the gateway")
