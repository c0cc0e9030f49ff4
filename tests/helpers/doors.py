"""Run a test module against both doors (``server.door``: "app" and "lean").

Import ``both_doors`` and ``door_make_config`` into a test module: every test there that
builds its config with ``make_config`` then runs once per door, with the
same assertions. The ``make_config`` here wraps the shared one and sets
``server.door`` unless the test set it itself. The door is the server
protocol's, so the test must serve through ``GatewayRunner`` (``served``, or
``GatewayTestServer`` below), not aiohttp's plain test server.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from aiohttp.web_runner import BaseRunner

from gateway.server.listener import GatewayRunner
from tests.helpers.config import MakeConfig

DOORS = ("app", "lean")


@pytest.fixture(name="door", params=DOORS)
def both_doors(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(name="make_config")
def door_make_config(make_config: MakeConfig, door: str) -> MakeConfig:
    base = make_config

    def make(raw: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        raw = dict(raw or {})
        raw["server"] = {"door": door, **raw.get("server", {})}
        return base(raw, **kwargs)

    return make


class GatewayTestServer(TestServer):
    """aiohttp's ``TestServer`` on ``GatewayRunner``, so ``server.door`` applies.

    For tests written with ``aiohttp_client(app)``: ``aiohttp_client(GatewayTestServer(app))``
    keeps the client they use and serves through the gateway's own protocol.
    """

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        return GatewayRunner(self.app, metrics_listen="", **kwargs)
