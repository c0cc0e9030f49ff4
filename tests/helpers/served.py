"""Serve the real app on a free loopback port, through the gateway's own runner.

The one way tests serve ``create_app(cfg)`` in-process: the production
``GatewayRunner`` (timeouts, connection cap, drain), never aiohttp's test
server, so what a test sees on the socket is what a client would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from gateway.app import create_app
from gateway.config import Config
from gateway.server.listener import GatewayRunner

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Served:
    """What a test needs of a served app: its address, the app and the runner."""

    url: str
    port: int
    app: web.Application
    runner: GatewayRunner


@asynccontextmanager
async def served(cfg: Config) -> AsyncIterator[Served]:
    """``create_app(cfg)`` served with ``GatewayRunner`` on port 0; cleaned up on exit."""
    app = create_app(cfg)
    runner = GatewayRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, 0).start()
        port = int(runner.addresses[0][1])
        yield Served(f"http://{HOST}:{port}", port, app, runner)
    finally:
        await runner.cleanup()
