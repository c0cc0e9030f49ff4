"""Unit tests open no sockets and start no processes: this guard fails one that does.

``tests/unit`` is the edit-run loop's fast half; anything that needs a real
server, port or child process belongs in ``tests/integration``. The guard
patches the calls every such test ends up making (``connect``/``bind`` on a
Python socket, ``subprocess.Popen``), so a test that drifts is caught where it
is written, not when the fast loop gets slow.
"""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest


def _refuse(what: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a unit test called {what}: move it to tests/integration")

    return refuse


@pytest.fixture(autouse=True)
def _no_sockets_no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"socket.{name}"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("subprocess.Popen"))
