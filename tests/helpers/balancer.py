"""A tiny round-robin TCP load balancer, health-checked against ``/readyz``.

It stands in for the HAProxy of ``compose.yaml`` in tests: each accepted
connection goes to the next ready backend and bytes are piped both ways.
Like HAProxy in TCP mode it balances connections, not requests, so clients
that want their load spread open several keep-alive connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

LOOPBACK = "127.0.0.1"


@dataclass
class Backend:
    host: str
    port: int
    ready: bool = True


@dataclass
class Balancer:
    """``async with Balancer(backends) as lb``: listens on ``lb.port``."""

    backends: list[Backend]
    check_interval_s: float = 0.2
    port: int = 0
    connections: Counter[int] = field(default_factory=Counter)  # backend port -> count
    _server: asyncio.Server | None = None
    _checker: asyncio.Task[None] | None = None
    _pipes: set[asyncio.Task[None]] = field(default_factory=set)
    _rr: itertools.count[int] = field(default_factory=itertools.count)

    async def __aenter__(self) -> Balancer:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._checker = asyncio.create_task(self._check_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def _pick(self) -> Backend | None:
        ready = [b for b in self.backends if b.ready]
        if not ready:
            return None
        return ready[next(self._rr) % len(ready)]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = self._pick()
        if backend is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(backend.host, backend.port)
        except OSError:
            writer.close()
            return
        self.connections[backend.port] += 1
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                dst.close()

    async def _check_forever(self) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await asyncio.gather(*(self._check(session, b) for b in self.backends))
                await asyncio.sleep(self.check_interval_s)

    @staticmethod
    async def _check(session: aiohttp.ClientSession, backend: Backend) -> None:
        try:
            async with session.get(f"http://{backend.host}:{backend.port}/readyz") as resp:
                backend.ready = resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            backend.ready = False
