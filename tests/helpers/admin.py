"""The admin API as an operator reaches it: a real app, its metrics listener on a free port.

``admin_tokens()`` makes a write and a read token (the config holds only
their SHA-256); ``AdminStack`` runs the real app (``create_app``) on a test
server and a ``MetricsListener`` on 127.0.0.1:0 in front of it, and calls
``/admin/*`` there with a real aiohttp client.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import Config
from gateway.ops.metricsport import MetricsListener
from gateway.telemetry.metrics import METRICS


@dataclass(frozen=True)
class Tokens:
    write: str
    read: str

    def table(self) -> dict[str, Any]:
        """The ``[admin]`` table naming them by hash."""
        return {
            "tokens": [
                {"name": "ops-write", "sha256": _sha(self.write), "role": "write"},
                {"name": "ops-read", "sha256": _sha(self.read), "role": "read"},
            ]
        }


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def admin_tokens() -> Tokens:
    return Tokens(write="w-" + secrets.token_urlsafe(24), read="r-" + secrets.token_urlsafe(24))


@dataclass
class AdminStack:
    """One gateway process: its public test server and its metrics listener."""

    cfg: Config
    app: web.Application = field(init=False)
    server: TestServer = field(init=False)
    listener: MetricsListener = field(init=False)
    session: aiohttp.ClientSession = field(init=False)

    async def start(self) -> AdminStack:
        self.app = create_app(self.cfg)
        self.server = TestServer(self.app)
        await self.server.start_server()
        self.listener = MetricsListener(self.app[METRICS], "127.0.0.1:0", details=self.app)
        await self.listener.start()
        self.session = aiohttp.ClientSession()
        return self

    async def close(self) -> None:
        await self.session.close()
        await self.listener.close()
        await self.server.close()

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.listener.port}/admin"

    async def call(
        self, method: str, path: str, token: str | None, body: Any = None
    ) -> tuple[int, Any]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with self.session.request(
            method, self.admin_url + path, json=body, headers=headers
        ) as resp:
            return resp.status, await resp.json()

    async def rpc(self, key: str, method: str, params: list[Any]) -> tuple[int, str, Any]:
        """One JSON-RPC call on the public port: (status, X-Gateway-Node, body)."""
        call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        url = str(self.server.make_url(f"/bsc/{key}"))
        async with self.session.post(url, json=call) as resp:
            return resp.status, resp.headers.get("X-Gateway-Node", ""), await resp.json()
