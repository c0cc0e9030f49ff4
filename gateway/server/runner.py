"""``gateway serve``: one process, N workers (``gateway.server.workers``), or the offline demo.

This module is also each worker's entry point (``python -m gateway.server.runner
--worker ...``, started by the supervisor only).

It stays whole because the three ways to serve (one process, a worker started
by the supervisor, the offline demo) share the event loop and open-files setup
here, and the demo's key and banner are most of the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config, NetworkConfig, data_dir
from gateway.ops.logsetup import setup_logging
from gateway.redis.embedded import RedisProcess, ensure_embedded
from gateway.redis.keyspace import record_key
from gateway.server.listener import ListenError, bind_listener, serve_app
from gateway.server.workers import Supervisor, config_to_raw

__all__ = ["config_to_raw", "serve"]

log = logging.getLogger("gateway.serve")

DEMO_EMAIL = "demo@example.com"
DEMO_PASSWORD = "demo-password"


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
) -> int:
    """Run the gateway; the exit code. ``reload`` re-reads the config on SIGHUP (workers).

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
            return _serve_demo(cfg)
        embedded: RedisProcess | None = None
        if not cfg.redis.url:
            url, embedded = ensure_embedded(data_dir(cfg))
            cfg = dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, url=url))
        try:
            if cfg.server.workers <= 1:
                _run(create_app(cfg), cfg)
                return 0

            def reloaded() -> Config:
                assert reload is not None
                fresh = overridden(reload())
                if not fresh.redis.url:
                    fresh = dataclasses.replace(fresh, redis=cfg.redis)
                return fresh

            return Supervisor(cfg, reloaded if reload is not None else None).run()
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
                    print(
                        f"======== Running on http://{cfg.server.host}:{f.result()} ========\n"
                        "(Press CTRL+C to quit)",
                        flush=True,
                    )
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


# -- the offline demo --------------------------------------------------------
def _serve_demo(cfg: Config) -> int:
    from gateway.demo.mockbuilder import lands_on, start_mock_builder
    from gateway.demo.mockws import Chain, start_ws_node

    tmp = tempfile.TemporaryDirectory(prefix="gateway-demo-")
    redis_proc = RedisProcess(Path(tmp.name), persist=False)
    url = redis_proc.start()

    async def build() -> web.Application:
        # one HTTP + WebSocket mock node per network, a block a second, so
        # eth_subscribe works in the demo too; and a mock builder (the private route)
        nodes, builders = [], []
        for net in cfg.networks:
            chain = Chain(net.chain_id, block_time_s=1.0)
            nodes.append(await start_ws_node(chain))
            builders.append(await start_mock_builder(net.chain_id, lands_on(chain)))
            chain.start()
        networks = tuple(
            # the mock mines a block per transaction too, as a dev chain does:
            # faster than a real network's block time, so no block-time check
            dataclasses.replace(
                net,
                upstreams=(n.url,),
                ws_upstreams=(n.ws_url,),
                private_tx=(b.url,),
                block_time_s=0.0,
            )
            for net, n, b in zip(cfg.networks, nodes, builders, strict=True)
        )
        demo_cfg = dataclasses.replace(
            cfg, networks=networks, redis=dataclasses.replace(cfg.redis, url=url)
        )
        app = create_app(demo_cfg)

        async def nodes_ctx(app: web.Application) -> AsyncIterator[None]:
            try:
                yield
            finally:
                for node, builder in zip(nodes, builders, strict=True):
                    await node.close()
                    await node.chain.stop()
                    await builder.close()

        # first in, so last out: the pools and head followers stop before their
        # nodes do (stopped after them, each logged a probe failure on the way out)
        app.cleanup_ctx.insert(0, nodes_ctx)
        app.on_startup.append(_demo_key)
        return app

    try:
        _run(build(), cfg)
    finally:
        redis_proc.stop()
        tmp.cleanup()
    return 0


async def _demo_key(app: web.Application) -> None:
    cfg = app[T.CONFIG]
    store = app[T.STORE]
    acct = await store.create_account(DEMO_EMAIL, DEMO_PASSWORD, "free")
    key, _ = await store.create_key(acct.id, name="demo", env="development")
    private, rec = await store.create_key(acct.id, name="demo-private", env="development")
    # as `gateway keys update --private-tx on` does (nothing cached it yet: no publish)
    await store.redis.hset(record_key(store.prefix, await store.key_hash_of(rec.id)), "ptx", "on")
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    print(_demo_banner(base, key, cfg.networks), flush=True)
    print(f"Demo API key with private transactions on (mock builder): {private}\n", flush=True)


def _demo_banner(base: str, key: str, networks: tuple[NetworkConfig, ...]) -> str:
    body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    lines = [
        "",
        "rpc-gateway demo: embedded Redis, mock nodes for "
        + ", ".join(f"{n.name} (chain {n.chain_id})" for n in networks)
        + ".",
        f"Demo account: {DEMO_EMAIL} / {DEMO_PASSWORD}   dashboard: {base}/dashboard",
        f"Demo API key: {key}",
        "",
        "Try:",
        f"  export RPC_KEY={key}",
    ]
    for net in networks:
        lines.append(
            f"  curl -s -X POST {base}{net.prefix}/$RPC_KEY "
            f"-H 'Content-Type: application/json' -d '{body}'"
        )
        lines.append(
            f'  curl -s -X POST {base}{net.prefix} -H "Authorization: Bearer $RPC_KEY" '
            f"-H 'Content-Type: application/json' -d '{body}'"
        )
    ws = "ws" + base[len("http") :]
    sub = '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}'
    first = networks[0].prefix if networks else "/bsc"
    lines += [
        "",
        "WebSocket (new blocks as they come):",
        f"  websocat -n '{ws}{first}/'$RPC_KEY <<< '{sub}'",
        "  python - <<'EOF'",
        "import asyncio, os",
        "from web3 import AsyncWeb3, WebSocketProvider",
        "async def main():",
        f"    url = '{ws}{first}/' + os.environ['RPC_KEY']",
        "    async with AsyncWeb3(WebSocketProvider(url)) as w3:",
        "        await w3.eth.subscribe('newHeads')",
        "        async for msg in w3.socket.process_subscriptions():",
        "            print(int(msg['result']['number']))",
        "asyncio.run(main())",
        "EOF",
    ]
    lines += ["", "Ctrl-C stops everything.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        raise SystemExit(_worker_main(sys.argv[1:]))
