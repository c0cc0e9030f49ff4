"""Types of the shared fixtures (conftest.py), so tests call them with checked arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import Config

TESTDATA = Path(__file__).resolve().parent.parent / "testdata"


class MakeConfig(Protocol):
    """The ``make_config`` fixture: the test Redis and mock nodes, plus overrides.

    ``raw`` is TOML-shaped and merged over the defaults; ``upstreams`` replaces a
    network's node list; keyword arguments replace top-level Config fields.
    """

    def __call__(
        self,
        raw: dict[str, Any] | None = None,
        *,
        upstreams: dict[str, list[str]] | None = None,
        **replace: Any,
    ) -> Config: ...


def scenario(name: str, **values: object) -> str:
    """The text of ``tests/testdata/<name>.toml`` with ``{placeholders}`` filled in."""
    return (TESTDATA / f"{name}.toml").read_text().format(**values)


Client = TestClient[web.Request, web.Application]
"""The ``client`` fixture: the real app on a real port (aiohttp's test client)."""


class Cli(Protocol):
    """The ``cli`` fixture: run ``gateway ...`` in-process; (exit code, stdout, stderr)."""

    def __call__(self, *args: str, stdin: str = "") -> tuple[int, str, str]: ...
