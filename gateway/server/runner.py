"""``gateway serve``: one process, N workers (``gateway.server.workers``), or the offline demo.

This module is also each worker's entry point (``python -m gateway.server.runner
--worker ...``, started by the supervisor only).

The offline demo's stack (embedded Redis, mock nodes and builders, the demo keys
and banner) is ``server.demo``; it is served here like any app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.app import create_app
from gateway.config import Config, data_dir
from gateway.ops.logsetup import setup_logging
from gateway.redis.embedded import RedisProcess, ensure_embedded
from gateway.server.demo import demo_app
from gateway.server.inplace import InPlace
from gateway.server.listener import ListenError, bind_listener, serve_app
from gateway.server.workers import Supervisor, config_to_raw

__all__ = ["config_to_raw", "serve"]

log = logging.getLogger("gateway.serve")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(
    cfg: Config,
    *,
    demo: bool = False,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    metrics_listen: str | None = None,
    reload: Callable[[], Config] | None = None,
    check: Callable[[], tuple[Config | None, list[str]]] | None = None,
) -> int:
    """Run the gateway; the exit code. ``reload`` re-reads the config on SIGHUP (workers);
    ``check`` re-reads it listing every mistake (the admin API's ``POST /admin/reload``).

    A port that cannot be bound is one line on stderr and exit code 1; the
    ready banner is printed only once the port listens.
    """
    setup_logging()

    def overridden(base: Config) -> Config:
        server = dataclasses.replace(
            base.server,
            host=host or base.server.host,
            port=base.server.port if port is None else port,
            workers=workers or base.server.workers,
            metrics_listen=base.server.metrics_listen if metrics_listen is None else metrics_listen,
        )
        return dataclasses.replace(base, server=server)

    cfg = overridden(cfg)
    try:
        if demo or cfg.server.workers <= 1:  # a busy port fails before Redis or nodes start
            bind_listener(cfg.server.host, cfg.server.port, reuse_port=False, backlog=1).close()
        if demo:
            with demo_app(cfg) as app:
                _run(app, cfg)
            return 0
        embedded: RedisProcess | None = None
        if not cfg.redis.url:
            url, embedded = ensure_embedded(data_dir(cfg))
            cfg = dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, url=url))
        try:

            def as_served(fresh: Config) -> Config:
                fresh = overridden(fresh)  # the command line's flags still win
                if not fresh.redis.url:
                    fresh = dataclasses.replace(fresh, redis=cfg.redis)
                return fresh

            def checked() -> tuple[Config | None, list[str]]:
                assert check is not None
                fresh, problems = check()
                return (as_served(fresh) if fresh is not None else None), problems

            checker = checked if check is not None else None
            if cfg.server.workers <= 1:  # reloads swap apps in this process
                _raise_open_files(cfg.server.max_connections + _SPARE_FILES)
                with asyncio.Runner(loop_factory=_new_loop) as loop:
                    loop.run(InPlace(cfg, checker, _banner(cfg)).run())
                return 0

            def reloaded() -> Config:
                assert reload is not None
                return as_served(reload())

            return Supervisor(cfg, reloaded if reload is not None else None, checker).run()
        finally:
            if embedded is not None:
                embedded.stop()
    except ListenError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 1


def _run(
    app: web.Application | Awaitable[web.Application],
    cfg: Config,
    *,
    reuse_port: bool = False,
    print_banner: bool = True,
    ready_fd: int | None = None,
    parent: int | None = None,
) -> None:
    """Serve one app in this process until SIGINT/SIGTERM, then drain (server.py).

    ``ready_fd`` (a worker's pipe to its supervisor) gets this pid once the
    port listens; ``parent`` is watched and its death stops (drains) us.
    """

    _raise_open_files(cfg.server.max_connections + _SPARE_FILES)

    async def main() -> None:
        built = app if isinstance(app, web.Application) else await app
        stop = asyncio.Event()
        watcher = (
            asyncio.create_task(_watch_parent(parent, stop), name="watch-parent")
            if parent is not None
            else None
        )
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if ready_fd is not None:
            ready.add_done_callback(
                lambda f: (
                    os.write(ready_fd, b"%d\n" % os.getpid())
                    if not f.cancelled() and f.exception() is None
                    else None
                )
            )
        if print_banner:
            ready.add_done_callback(
                lambda f: (
                    _banner(cfg)(f.result())
                    if not f.cancelled() and f.exception() is None
                    else None
                )
            )
        try:
            await serve_app(
                built,
                cfg.server.host,
                cfg.server.port,
                reuse_port=reuse_port,
                ready=ready,
                stop=stop,
            )
        finally:
            if watcher is not None:
                watcher.cancel()

    with asyncio.Runner(loop_factory=_new_loop) as runner:
        runner.run(main())


def _banner(cfg: Config) -> Callable[[int], None]:
    def say(port: int) -> None:
        print(
            f"======== Running on http://{cfg.server.host}:{port} ========\n(Press CTRL+C to quit)",
            flush=True,
        )

    return say


_SPARE_FILES = 1024  # upstream pools, Redis, logs: descriptors beyond client connections


def _raise_open_files(wanted: int) -> None:
    """Lift the soft open-file limit towards ``wanted`` (at most the hard limit).

    A default ``ulimit -n`` of 1024 would make accept() fail long before
    ``server.max_connections``; say so when the hard limit is too low.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    target = wanted if hard == unlimited else min(wanted, hard)
    if soft != unlimited and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft != unlimited and soft < wanted:
        log.warning(
            "open-file limit is %s, below server.max_connections + %s = %s; "
            "raise it (ulimit -n) or lower server.max_connections",
            soft,
            _SPARE_FILES,
            wanted,
        )


def _worker_main(argv: list[str]) -> int:
    """A ``serve --workers`` worker: config from the inherited pipe, never from env.

    ``--config-fd N --ready-fd M --parent P``: read the config JSON from fd N
    (then closed), write our pid to fd M once listening, and stop (drain)
    when process P, the supervisor, is gone.
    """
    from gateway.config import config_from_dict

    setup_logging()
    opts = dict(zip(argv[1::2], (int(v) for v in argv[2::2]), strict=True))
    parent = opts["--parent"]
    _die_with_parent(parent)
    with open(opts["--config-fd"], "rb") as pipe:
        cfg = config_from_dict(orjson.loads(pipe.read()), {})
    try:
        _run(
            create_app(cfg),
            cfg,
            reuse_port=True,
            print_banner=False,
            ready_fd=opts["--ready-fd"],
            parent=parent,
        )
    except ListenError as exc:
        log.error("worker cannot listen: %s", exc)
        return 3
    return 0


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when ``parent`` dies (Linux); exit now if it already has.

    The fallback for other systems, and for a parent gone before the prctl
    call, is ``_watch_parent``'s poll of the parent pid.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no usable libc
            log.warning("PR_SET_PDEATHSIG unavailable; polling the parent pid only")
    if os.getppid() != parent:
        raise SystemExit(0)


async def _watch_parent(parent: int, stop: asyncio.Event, interval_s: float = 1.0) -> None:
    """Set ``stop`` once ``parent`` is no longer this process's parent."""
    while os.getppid() == parent:  # noqa: ASYNC110 - nothing to wait on but the pid
        await asyncio.sleep(interval_s)
    log.warning("supervisor pid=%s is gone; stopping", parent)
    stop.set()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        raise SystemExit(_worker_main(sys.argv[1:]))
