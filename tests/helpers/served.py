"""Serve the real app on a free loopback port, through the gateway's own runner."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from gateway.app import create_app
from gateway.config import Config
from gateway.server.protocol import GatewayRunner

HOST = "127.0.0.1"


@asynccontextmanager
async def served(cfg: Config) -> AsyncIterator[tuple[str, web.Application]]:
    """(base URL, app) of ``create_app(cfg)`` served with ``GatewayRunner``."""
    app = create_app(cfg)
    runner = GatewayRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, 0).start()
        yield f"http://{HOST}:{runner.addresses[0][1]}", app
    finally:
        await runner.cleanup()
