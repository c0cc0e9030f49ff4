"""The ``/metrics`` listener: its own port (``server.metrics_listen``), never the public one.

Prometheus text tells an outsider which methods and nodes are in use, how
busy the gateway is and when it fails, so it is served on a separate
address (loopback by default) that a firewall or compose network keeps
private, while the public port answers 404 for ``/metrics``.

Several processes of one gateway (``serve --workers N``, gunicorn) cannot
all bind one address, and there is no supervisor under gunicorn to do it
for them. So every process *contends*: the first to bind serves the merged
multiprocess view (``gateway.ops.metrics``), the others retry every
``RETRY_S`` seconds, and when the holder exits (killed, restarted, drained
on SIGHUP) another takes over within that time. A single process whose
address is taken by someone else logs a warning and keeps serving RPC: a
busy metrics port never takes the gateway down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from gateway import typedefs as T
from gateway.config import listen_address
from gateway.ops.metrics import Metrics
from gateway.ops.routes import metrics as metrics_view

log = logging.getLogger("gateway.metrics")

RETRY_S: Final = 2.0  # how soon another process takes over a released address


class MetricsListener:
    """Serves ``GET /metrics`` of one ``Metrics`` on ``address`` once it can bind it."""

    def __init__(self, metrics: Metrics, address: str, *, retry_s: float = RETRY_S) -> None:
        parsed = listen_address(address)
        if parsed is None:
            raise ValueError(f"server.metrics_listen: {address!r} is not host:port")
        self._host, self._port = parsed
        self._retry_s = retry_s
        app = web.Application()
        app[T.METRICS] = metrics
        app.router.add_get("/metrics", metrics_view)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._retry: asyncio.Task[None] | None = None
        self._site: web.TCPSite | None = None

    @property
    def port(self) -> int | None:
        """The bound port (useful with port 0), or None while another process holds it."""
        if self._site is None:
            return None
        addresses = self._runner.addresses
        return int(addresses[0][1]) if addresses else None

    async def start(self) -> None:
        """Bind now if the address is free, else keep trying in the background."""
        await self._runner.setup()
        if not await self._try_bind():
            log.warning(
                "metrics address %s:%s is in use; another process serves /metrics "
                "(retrying every %ss)",
                self._host,
                self._port,
                self._retry_s,
            )
            self._retry = asyncio.create_task(self._keep_trying(), name="metrics-listen")

    async def _try_bind(self) -> bool:
        site = web.TCPSite(self._runner, self._host, self._port, reuse_port=False)
        try:
            await site.start()
        except OSError:
            await site.stop()  # unregisters it from the runner; nothing was bound
            return False
        self._site = site
        log.info("metrics on http://%s:%s/metrics", self._host, self.port)
        return True

    async def _keep_trying(self) -> None:
        # Polling is the point: nothing tells us when another process lets go.
        while not await self._try_bind():  # noqa: ASYNC110
            await asyncio.sleep(self._retry_s)

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry
        await self._runner.cleanup()


async def metrics_listener_ctx(app: web.Application) -> AsyncIterator[None]:
    """``cleanup_ctx`` for an app served by a runner that is not ours (gunicorn's own)."""
    address = app[T.CONFIG].server.metrics_listen
    listener = MetricsListener(app[T.METRICS], address) if address else None
    if listener is not None:
        await listener.start()
    try:
        yield
    finally:
        if listener is not None:
            await listener.close()
