"""The endpoints page's copy-paste examples run as printed.

Each example is taken from the rendered page of a logged-in user, the
placeholder-free way a user copies it, and run by the real tool against the
real app: curl (both key forms), web3.py, ethers v6 and viem (Node, from
tests/js). Each must print the block number the mock node is at.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.demo.mocknode import MockNode
from tests.helpers.config import Client
from tests.helpers.dashboard import User, new_email

JS = Path(__file__).resolve().parents[2] / "tests" / "js"
AiohttpClient = Any

pytestmark = pytest.mark.slow


async def _examples(client: Client, aiohttp_client: AiohttpClient) -> tuple[str, dict[str, str]]:
    """(a fresh key, {example title: code}) for bsc, as the page shows them."""
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    key, _ = await user.create_key()
    doc = await user.get("/dashboard/endpoints")
    section = next(s for s in doc.tags("section") if s.attrs.get("aria-labelledby") == "ex-bsc")
    titles = [h.text.strip() for h in section.tags("h3")]
    codes = [c.text for c in section.tags("code")]
    assert len(titles) == len(codes)
    return key, dict(zip(titles, codes, strict=True))


async def _run(*cmd: str, key: str, cwd: Path | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        env={**os.environ, "RPC_KEY": key},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return out.decode()


def _head(text: str) -> int:
    """The block number an example printed (``1000`` or ``1000n`` or inside JSON)."""
    found = re.findall(r"(?:0x[0-9a-f]+|\d+)", text)
    assert found, text
    last = found[-1]
    return int(last, 16) if last.startswith("0x") else int(last)


async def test_python_and_curl_examples_run(
    client: Client, aiohttp_client: AiohttpClient, mock_nodes: dict[str, MockNode]
) -> None:
    key, examples = await _examples(client, aiohttp_client)
    out = await _run(sys.executable, "-c", examples["web3.py"], key=key)
    assert _head(out) >= mock_nodes["bsc"].head - 5
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    for title in ("curl, key in the path", "curl, key in the Authorization header"):
        script = "\n".join(
            line for line in examples[title].splitlines() if not line.startswith("export ")
        )
        out = await _run("bash", "-c", script, key=key)
        assert '"result"' in out and _head(out) >= mock_nodes["bsc"].head - 5, out


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS / "node_modules" / "viem").is_dir(),
    reason="npm ci --prefix tests/js has not run",
)
@pytest.mark.parametrize("title", ["ethers (v6)", "viem"])
async def test_javascript_examples_run(
    client: Client,
    aiohttp_client: AiohttpClient,
    mock_nodes: dict[str, MockNode],
    tmp_path: Path,
    title: str,
) -> None:
    key, examples = await _examples(client, aiohttp_client)
    (tmp_path / "node_modules").symlink_to(JS / "node_modules")
    script = tmp_path / "example.mjs"
    script.write_text(examples[title])
    out = await _run("node", str(script), key=key, cwd=tmp_path)
    assert _head(out) >= mock_nodes["bsc"].head - 5, out
