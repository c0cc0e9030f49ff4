"""The ``/metrics`` listener: its own port (``server.metrics_listen``), never the public one.

Prometheus text tells an outsider which methods and nodes are in use, how
busy the gateway is and when it fails, so it is served on a separate
address (loopback by default) that a firewall or compose network keeps
private, while the public port answers 404 for ``/metrics``.

Several processes of one gateway cannot all bind one address:

* ``serve --workers N``: the supervisor holds the one listener for its
  whole life (``SupervisorMetricsListener``, a small thread beside its
  loop) and serves every worker's samples merged; workers start none, so
  there is no contention and no warning per worker, and a worker's restart
  or a SIGHUP reload leaves no gap in scrapes.
* gunicorn has no supervisor of ours, so there every process *contends*:
  the first to bind serves the merged multiprocess view
  (``gateway.telemetry.metrics``), the others retry every ``RETRY_S`` seconds, and
  when the holder exits another takes over within that time.

A process whose address is taken by someone else logs one warning and keeps
serving RPC: a busy metrics port never takes the gateway down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import multiprocess as _mp

from gateway import typedefs as T
from gateway.config import listen_address
from gateway.ops import readysnap
from gateway.ops.adminrelay import SupervisorAdmin, admin_answer
from gateway.ops.routes import metrics as metrics_view
from gateway.ops.routes import readyz_details, readyz_network_details
from gateway.telemetry.metrics import METRICS, Metrics

log = logging.getLogger("gateway.metrics")

RETRY_S: Final = 2.0  # how soon another process takes over a released address


class MetricsListener:
    """Serves ``GET /metrics`` of one ``Metrics`` on ``address`` once it can bind it."""

    def __init__(
        self,
        metrics: Metrics,
        address: str,
        *,
        retry_s: float = RETRY_S,
        details: web.Application | None = None,
    ) -> None:
        """``details``: the gateway app whose /readyz (nodes, Redis address) and
        admin API (``/admin``, when the app has one) this serves."""
        parsed = listen_address(address)
        if parsed is None:
            raise ValueError(f"server.metrics_listen: {address!r} is not host:port")
        self._host, self._port = parsed
        self._retry_s = retry_s
        app = web.Application()
        app[METRICS] = metrics
        app.router.add_get("/metrics", metrics_view)
        if details is not None:
            app[T.READY_SOURCE] = details
            app.router.add_get("/readyz", readyz_details)
            app.router.add_get("/readyz/{network}", readyz_network_details)
            mount = details.get(T.ADMIN_MOUNT)
            if mount is not None:  # the admin API (gateway.admin), at /admin
                mount(app)
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
    listener = MetricsListener(app[METRICS], address, details=app) if address else None
    if listener is not None:
        await listener.start()
    try:
        yield
    finally:
        if listener is not None:
            await listener.close()


class SupervisorMetricsListener:
    """``GET /metrics`` for ``serve --workers``, served by the supervisor itself,
    ``GET /readyz`` from the workers' snapshots (``gateway.ops.readysnap``) and
    the admin API relayed to a worker (``gateway.ops.adminrelay``).

    The supervisor's loop is synchronous (``select`` on a pipe), so this runs
    a threaded stdlib HTTP server in a daemon thread: scrapes are rare and
    small, and each reads the workers' multiprocess files in ``metrics_dir``.
    ``poll`` (called every loop tick) binds once the address is free, so a
    port held by someone else costs one warning, then a quiet retry.
    """

    def __init__(
        self,
        address: str,
        metrics_dir: str,
        *,
        retry_s: float = RETRY_S,
        admin: SupervisorAdmin | None = None,
    ) -> None:
        """``admin``: the supervisor's own part of the admin API (``POST /admin/reload``);
        every other ``/admin/*`` call is relayed to a worker (``ops.adminrelay``)."""
        parsed = listen_address(address)
        if parsed is None:
            raise ValueError(f"server.metrics_listen: {address!r} is not host:port")
        self._host, self._port = parsed
        self._dir = metrics_dir
        self._retry_s = retry_s
        self._admin = admin
        self._server: ThreadingHTTPServer | None = None
        self._next_try = 0.0
        self._warned = False

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def poll(self, now: float | None = None) -> None:
        """Bind if not bound yet and a retry is due."""
        now = time.monotonic() if now is None else now
        if self._server is not None or now < self._next_try:
            return
        self._next_try = now + self._retry_s
        try:
            server = _MetricsHTTPServer(
                (self._host, self._port), self._exposition, self._dir, self._admin
            )
        except OSError as exc:
            if not self._warned:
                log.warning(
                    "metrics address %s:%s is unavailable (%s); retrying every %ss",
                    self._host,
                    self._port,
                    exc.strerror or type(exc).__name__,
                    self._retry_s,
                )
                self._warned = True
            return
        self._server = server
        threading.Thread(target=server.serve_forever, name="metrics-listen", daemon=True).start()
        log.info("metrics on http://%s:%s/metrics (every worker)", self._host, self.port)

    def _exposition(self) -> bytes:
        merged = CollectorRegistry()
        _mp.MultiProcessCollector(merged, path=self._dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _MetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        exposition: Any,
        folder: str,
        admin: SupervisorAdmin | None = None,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.exposition = exposition
        self.folder = folder  # the workers' multiprocess directory (their /readyz snapshots)
        self.admin = admin
        super().__init__(address, _MetricsHandler)


class _MetricsHandler(BaseHTTPRequestHandler):
    timeout = 10  # an idle scraper connection does not hold a thread for ever
    server: _MetricsHTTPServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/admin" or path.startswith("/admin/"):
            self._admin_call(path)
            return
        if path == "/readyz" or path.startswith("/readyz/"):
            self._readyz(path)
            return
        if path != "/metrics":
            self._answer(404, b"404: Not Found", "text/plain; charset=utf-8")
            return
        try:
            body = self.server.exposition()
        except Exception:  # a worker's file mid-write: the next scrape reads it
            log.exception("metrics: could not merge the workers' samples")
            self._answer(500, b"500: could not read the workers' samples", "text/plain")
            return
        self._answer(200, body, CONTENT_TYPE_LATEST)

    def _writes(self) -> None:
        """POST, PATCH, DELETE: the admin API only."""
        path = self.path.split("?", 1)[0]
        if path == "/admin" or path.startswith("/admin/"):
            self._admin_call(path)
            return
        self._answer(405, b"405: Method Not Allowed", "text/plain; charset=utf-8")

    do_POST = do_PATCH = do_DELETE = _writes

    def _admin_call(self, path: str) -> None:
        """The admin API: reload here (the supervisor's), anything else on a worker."""
        status, ctype, body = admin_answer(
            self.server.folder, self.server.admin, self.command, self.path, self.headers, self.rfile
        )
        if status == 413:
            self.close_connection = True  # the body was not read
        self._answer(status, body, ctype)

    def _readyz(self, path: str) -> None:
        """The workers' /readyz details (gateway.ops.readysnap): the freshest snapshot."""
        snap = readysnap.freshest(self.server.folder)
        if snap is None:
            body: dict[str, Any] = {"ready": False, "error": "no worker has reported lately"}
            status = 503
        elif path == "/readyz":
            body, status = snap["body"], snap["status"]
        else:
            body, status = readysnap.network_view(snap, path[len("/readyz/") :])
        self._answer(status, orjson.dumps(body), "application/json")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the stdlib would write every scrape to stderr."""
