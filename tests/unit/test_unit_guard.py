"""The tests/unit guard itself: a socket or a child process fails the test."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest


def test_connect_is_refused() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(AssertionError, match="move it to tests/integration"),
    ):
        sock.connect(("127.0.0.1", 9))


def test_bind_is_refused() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(AssertionError, match=r"socket\.bind"),
    ):
        sock.bind(("127.0.0.1", 0))


def test_subprocess_is_refused() -> None:
    with pytest.raises(AssertionError, match=r"subprocess\.Popen"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
