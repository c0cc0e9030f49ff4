"""A real EVM node for the tests: the pinned Hardhat (tests/js), started like Redis is.

One ``hardhat node`` per session on a free loopback port, chain id from
``HARDHAT_CHAIN_ID`` (56: it stands in for a BSC node). It starts in ~3 s;
the fixture skips, saying why, where node or tests/js/node_modules is
missing (``cd tests/js && npm ci`` installs it). A module uses it with
``from tests.helpers.hardhat import hardhat  # noqa: F401``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.redis.embedded import LOOPBACK, free_port
from tests.helpers.procs import stop

JS = Path(__file__).resolve().parent.parent / "js"
BINARY = JS / "node_modules" / ".bin" / "hardhat"
CHAIN_ID = 56


def missing() -> str | None:
    """Why Hardhat cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (Hardhat is a Node.js program)"
    if not BINARY.exists():
        return f"{BINARY} is missing: run `npm ci` in tests/js"
    return None


def rpc(url: str, method: str, params: list[object], timeout_s: float = 2.0) -> object:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        answer = json.loads(resp.read())
    return answer.get("result")


def start(
    log: Path, chain_id: int = CHAIN_ID, timeout_s: float = 60.0
) -> tuple[str, subprocess.Popen[bytes]]:
    """``hardhat node`` on a free port; returns its URL once it answers eth_chainId."""
    port = free_port()
    env = {**os.environ, "HARDHAT_CHAIN_ID": str(chain_id)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BINARY), "node", "--hostname", LOOPBACK, "--port", str(port)],
            cwd=JS,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{LOOPBACK}:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"hardhat exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if rpc(url, "eth_chainId", [], timeout_s=1.0) == hex(chain_id):
                return url, proc
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError("hardhat did not answer in time")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def hardhat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a Hardhat node with chain id 56 (skips with the reason where it cannot run)."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    url, proc = start(tmp_path_factory.mktemp("hardhat") / "hardhat.log")
    try:
        yield url
    finally:
        stop(proc)
