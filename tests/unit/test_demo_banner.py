"""The demo's banner prints only lines that run with what installing the package installed.

Its WebSocket line named websocat (not installed by anything here) and its
web3.py snippet needs web3 (a test extra, not a dependency): a user pasting
either after ``pip install .`` met "command not found" or an ImportError.
"""

from __future__ import annotations

from gateway.config import NetworkConfig
from gateway.server.demo import _demo_banner

NETWORKS = (
    NetworkConfig(
        name="bsc", prefix="/bsc", chain_id=56, upstreams=("http://n:1",), methods=frozenset()
    ),
)


def test_no_web3_snippet_where_web3_is_not_installed() -> None:
    text = _demo_banner("http://127.0.0.1:8545", "KEY", NETWORKS, with_web3=False)
    assert "web3" not in text
    assert "websocat" not in text
    assert "-m gateway.demo.wscat" in text  # the package's own WebSocket client


def test_web3_snippet_where_web3_is_installed() -> None:
    text = _demo_banner("http://127.0.0.1:8545", "KEY", NETWORKS, with_web3=True)
    assert "from web3 import AsyncWeb3, WebSocketProvider" in text
    assert "websocat" not in text
