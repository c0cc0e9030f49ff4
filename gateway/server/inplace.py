"""A single ``gateway serve`` process that applies a new config without dropping a call.

``serve --workers N`` reloads by starting new worker processes and draining
the old ones. A single process does the same inside itself: the new config
builds a whole new app (nodes, plans, weights, methods: everything), which
starts listening on the same port beside the running one (``SO_REUSEPORT``,
so the kernel hands new connections to either), and once it listens the old
app drains as on SIGTERM (the port closes, keep-alive calls are told
``Connection: close`` for ``server.drain_notice_s``, in-flight calls finish)
and runs its cleanup. A config whose app does not start (a port it cannot
bind, a Redis it cannot reach) leaves the old app serving.

What asks for it: SIGHUP (the config read again and checked whole first) and
the admin API's ``POST /admin/reload`` (``T.CONFIG_APPLY``, with a config it
checked). The metrics listener (and so the admin API) moves to the new app
when the old one has let go of its address, within its retry interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config
from gateway.server.listener import serve_app

log = logging.getLogger("gateway.serve")

Check = Callable[[], tuple[Config | None, list[str]]]


class InPlace:
    """The running app of one process, and the swap to a new one."""

    def __init__(self, cfg: Config, check: Check | None, banner: Callable[[int], None]) -> None:
        self._cfg = cfg
        self._check = check
        self._banner = banner
        self._wanted: asyncio.Queue[Config] = asyncio.Queue()
        self._stop = asyncio.Event()

    def _build(self, cfg: Config) -> web.Application:
        app = create_app(cfg)
        if self._check is not None:
            app[T.CONFIG_CHECK] = self._check
            app[T.CONFIG_APPLY] = self._wanted.put_nowait
        return app

    async def _start(
        self, cfg: Config
    ) -> tuple[asyncio.Task[None], asyncio.Event, asyncio.Future[int]]:
        stop = asyncio.Event()
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve_app(
                self._build(cfg),
                cfg.server.host,
                cfg.server.port,
                reuse_port=True,
                ready=ready,
                stop=stop,
                handle_signals=False,
            ),
            name="gateway-app",
        )
        waiting: set[asyncio.Future[object]] = {ready, task}  # type: ignore[arg-type]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        return task, stop, ready

    def _sighup(self) -> None:
        if self._check is None:
            log.warning("SIGHUP ignored: no config to reload")
            return
        fresh, problems = self._check()
        if fresh is None or problems:
            log.error("reload refused, the running config stays: %s", "; ".join(problems))
            return
        self._wanted.put_nowait(fresh)

    async def run(self) -> None:
        """Serve until SIGINT/SIGTERM, swapping apps on each config asked for."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._sighup)
        task, stop, ready = await self._start(self._cfg)
        if not ready.done():
            await task  # it never listened: its error is the process's
            return
        self._banner(ready.result())
        draining: set[asyncio.Task[None]] = set()
        try:
            while not self._stop.is_set():
                wanted = asyncio.create_task(self._wanted.get())
                stopping = asyncio.create_task(self._stop.wait())
                await asyncio.wait({wanted, stopping, task}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not wanted.done():
                    wanted.cancel()
                    break
                task, stop = await self._swap(task, stop, wanted.result(), draining)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            stop.set()
            await asyncio.gather(task, *draining, return_exceptions=True)

    async def _swap(
        self,
        task: asyncio.Task[None],
        stop: asyncio.Event,
        cfg: Config,
        draining: set[asyncio.Task[None]],
    ) -> tuple[asyncio.Task[None], asyncio.Event]:
        """Start ``cfg``'s app beside the running one; once it listens, drain the old."""
        server = cfg.server
        if (server.host, server.port) != (self._cfg.server.host, self._cfg.server.port):
            log.warning("reload: the listen address cannot change; keeping the old one")
            old = self._cfg.server
            cfg = _with_address(cfg, old.host, old.port)
        new_task, new_stop, ready = await self._start(cfg)
        if not ready.done():
            with contextlib.suppress(Exception):
                await new_task
            log.error("reload: the new config's app did not start; the old one keeps serving")
            return task, stop
        log.info("reload: the new config serves; draining the old app")
        self._cfg = cfg
        stop.set()
        draining.add(task)
        task.add_done_callback(draining.discard)
        return new_task, new_stop


def _with_address(cfg: Config, host: str, port: int) -> Config:
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, host=host, port=port))
