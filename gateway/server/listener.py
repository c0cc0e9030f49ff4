"""The listening half: ``GatewayRunner``, binding the port, ``serve_app``, gunicorn.

Use ``GatewayRunner(app)`` wherever aiohttp would use ``web.AppRunner``:
``gateway serve`` (``serve_app``), gunicorn (``gunicorn_app``) and tests. Its
connections are ``server.connection.GatewayProtocol``s (timeouts, connection cap,
malformed HTTP). The runner also opens the ``/metrics`` listener
(``gateway.ops.metricsport``) on ``server.metrics_listen``; with several
processes one holds it at a time. On shutdown the runner stops listening,
answers in-flight requests with ``Connection: close``, waits up to
``server.drain_timeout_s`` for them and only then runs the app's cleanup
(pools, Redis).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gateway import typedefs as T
from gateway.ops.accesslog import AccessLogger
from gateway.ops.logsetup import setup_logging
from gateway.ops.metricsport import MetricsListener
from gateway.server.connection import ConnectionWatch, GatewayServer
from gateway.server.door import lean_protocol
from gateway.telemetry.metrics import METRICS, mark_process_dead

log = logging.getLogger("gateway.server")


# server.door -> the protocol factory for an app ("app": aiohttp's own handler,
# GatewayProtocol). Every door is named here, so none registers itself.
DOORS: dict[str, Callable[[web.Application], Callable[..., RequestHandler]]] = {
    "lean": lean_protocol,
}


class ListenError(Exception):
    """The public port could not be bound; the message names it and says why."""


def bind_listener(host: str, port: int, *, reuse_port: bool, backlog: int) -> socket.socket:
    """A listening socket on ``host:port``, or ``ListenError`` naming the address.

    Bound before the app starts (Redis, pools), so that a busy port fails at
    once with one clear line instead of a traceback after a ready banner.
    """
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        return socket.create_server(
            infos[0][4][:2], family=infos[0][0], backlog=backlog, reuse_port=reuse_port
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {where}: unknown host ({exc.strerror})") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno == errno.EADDRINUSE:
            reason = "the port is already in use by another process"
        raise ListenError(f"cannot listen on {where}: {reason}") from None


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` with the gateway's protocol and server settings from config.

    ``setup()`` also starts the ``/metrics`` listener on ``server.metrics_listen``
    (``metrics_listen=""`` turns it off for this runner).
    """

    def __init__(
        self, app: web.Application, *, metrics_listen: str | None = None, **kwargs: Any
    ) -> None:
        cfg = app[T.CONFIG].server
        listen = cfg.metrics_listen if metrics_listen is None else metrics_listen
        self.metrics_listener = (
            MetricsListener(app[METRICS], listen, details=app)
            if listen and METRICS in app
            else None
        )
        kwargs.setdefault("keepalive_timeout", cfg.keepalive_timeout_s)
        kwargs.setdefault("shutdown_timeout", cfg.drain_timeout_s)
        kwargs.setdefault("access_log_class", AccessLogger)
        kwargs.setdefault(
            "access_log", logging.getLogger("gateway.access") if cfg.access_log else None
        )
        kwargs.setdefault("handle_signals", False)
        # The parser never inflates a body: rpc.inflate does, bounded and in
        # slices (aiohttp's inflated a gzip bomb on the loop as it arrived).
        kwargs.setdefault("auto_decompress", False)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # Same object, one more method: the app built it with its private
        # request factory, which a fresh GatewayServer could not reach.
        server.__class__ = GatewayServer
        assert isinstance(server, GatewayServer)
        server.watch = ConnectionWatch(self.app[T.CONFIG].server, self.app.get(METRICS))
        door = self.app[T.CONFIG].server.door
        if door != "app":
            server.make_protocol = DOORS[door](self.app)
        return server

    async def setup(self) -> None:
        await super().setup()
        if self.metrics_listener is not None:
            await self.metrics_listener.start()

    async def cleanup(self) -> None:
        """Stop listening, drain in-flight calls, run the app's cleanup."""
        try:
            await super().cleanup()
        finally:
            if self.metrics_listener is not None:
                await self.metrics_listener.close()
            mark_process_dead()

    @property
    def watch(self) -> ConnectionWatch:
        server = self.server
        assert isinstance(server, GatewayServer), "GatewayRunner.setup() was not awaited"
        return server.watch


def tune_gc(gen0_threshold: int) -> None:
    """Fewer, cheaper collections in a serving process (``server.gc_gen0_threshold``).

    Each request's objects die young, but with a thousand requests in flight
    they outlive gen-0 collections under Python's default threshold (700) and
    reach the full collections, which grew to 26 % of the CPU at 1,024
    connections (py-spy, docs/PERFORMANCE.md). ``gc.freeze`` takes everything
    alive after start-up out of every later collection; a higher gen-0
    threshold collects less often. Only serving processes call this (it is
    process-wide); 0 keeps Python's defaults.
    """
    if gen0_threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, max(gen1, 20), max(gen2, 100))


async def serve_app(
    app: web.Application,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    backlog: int = 1024,
    stop: asyncio.Event | None = None,
    ready: asyncio.Future[int] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve until SIGINT/SIGTERM (or ``stop``), then drain and clean up.

    The port is bound first: a busy one raises ``ListenError`` before anything
    else starts. ``ready`` receives the bound port once the socket listens.
    """
    sock = bind_listener(host, port, reuse_port=reuse_port, backlog=backlog)
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM) if handle_signals else ()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    runner = GatewayRunner(app)
    try:
        await runner.setup()
        tune_gc(app[T.CONFIG].server.gc_gen0_threshold)
        site = web.SockSite(runner, sock, backlog=backlog)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        if ready is not None and not ready.done():
            ready.set_result(int(bound))
        await stop.wait()
        server_cfg = app[T.CONFIG].server
        log.info(
            "draining for_s=%s connections=%s",
            server_cfg.drain_timeout_s,
            runner.watch.connections,
        )
        await _give_notice(site, runner.watch, server_cfg.drain_notice_s)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        sock.close()


async def _give_notice(site: web.BaseSite, watch: ConnectionWatch, notice_s: float) -> None:
    """Stop accepting, then for ``notice_s`` answer every call with ``Connection:
    close`` before the runner closes idle keep-alive connections: a client that
    sends just as an idle connection closes loses that call, one told to close
    opens its next connection to a process still listening (``SO_REUSEPORT``)."""
    await site.stop()
    if notice_s <= 0:
        return
    watch.closing = True
    deadline = time.monotonic() + notice_s
    while watch.connections and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def gunicorn_app() -> web.AppRunner:
    """Gunicorn entry: ``gunicorn gateway.server:gunicorn_app -k
    aiohttp.GunicornUVLoopWebWorker``. Returns a ``GatewayRunner`` so the slow
    client timeouts, the connection cap and the drain apply under gunicorn too
    (keep-alive and drain then come from the gateway config, not gunicorn's
    flags; keep gunicorn's ``--graceful-timeout`` above ``server.drain_timeout_s``).

    The access log goes to stderr like under ``gateway serve``. ``/metrics``
    is on ``server.metrics_listen``: one worker holds it, the others retry,
    and with ``PROMETHEUS_MULTIPROC_DIR`` set it reports every worker.
    """
    from gateway.app import create_app
    from gateway.config import load_config

    setup_logging()
    cfg = load_config()
    runner = GatewayRunner(create_app(cfg))
    tune_gc(cfg.server.gc_gen0_threshold)  # gunicorn imports and builds before serving
    return runner
