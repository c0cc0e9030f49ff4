"""``gateway serve``: one process, N SO_REUSEPORT workers, or the offline demo."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from gateway import typedefs as T
from gateway.accesslog import AccessLogger
from gateway.app import create_app
from gateway.config import Config, NetworkConfig, data_dir
from gateway.embedded import RedisProcess, ensure_embedded

log = logging.getLogger("gateway.serve")

DEMO_EMAIL = "demo@example.com"
DEMO_PASSWORD = "demo-password"


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _logging() -> None:
    logging.basicConfig(level=os.environ.get("GATEWAY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def serve(cfg: Config, *, demo: bool = False, host: str | None = None,
          port: int | None = None, workers: int | None = None) -> int:
    _logging()
    server = dataclasses.replace(
        cfg.server, host=host or cfg.server.host, port=cfg.server.port if port is None else port,
        workers=workers or cfg.server.workers)
    cfg = dataclasses.replace(cfg, server=server)
    if demo:
        return _serve_demo(cfg)
    embedded: RedisProcess | None = None
    if not cfg.redis.url:
        url, embedded = ensure_embedded(data_dir(cfg))
        cfg = dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, url=url))
    try:
        if server.workers <= 1:
            _run(create_app(cfg), cfg, reuse_port=False)
            return 0
        return _supervise(cfg)
    finally:
        if embedded is not None:
            embedded.stop()


def _run(app: web.Application | asyncio.Future[web.Application], cfg: Config, *,
         reuse_port: bool, print_banner: bool = True) -> None:
    web.run_app(app, host=cfg.server.host, port=cfg.server.port, reuse_port=reuse_port,
                access_log_class=AccessLogger,
                access_log=logging.getLogger("gateway.access") if cfg.server.access_log else None,
                shutdown_timeout=cfg.server.drain_timeout_s,
                keepalive_timeout=cfg.server.keepalive_timeout_s,
                backlog=1024, loop=_new_loop(),
                print=print if print_banner else None)


def _supervise(cfg: Config) -> int:
    """Start N worker processes on one port (SO_REUSEPORT) and wait for them.

    SIGINT/SIGTERM are passed on to every worker, which then drains.
    """
    env = {**os.environ, "GATEWAY_REDIS_URL": cfg.redis.url, "GATEWAY_WORKER": "1"}
    cmd = [sys.executable, "-m", "gateway.serve", "--worker", cfg.server.host,
           str(cfg.server.port)]
    if os.environ.get("GATEWAY_CONFIG"):
        env["GATEWAY_CONFIG"] = os.environ["GATEWAY_CONFIG"]
    procs = [subprocess.Popen(cmd, env=env) for _ in range(cfg.server.workers)]
    print(f"======== {len(procs)} workers on http://{cfg.server.host}:{cfg.server.port} ========",
          flush=True)

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    codes = [proc.wait() for proc in procs]
    return max(codes, default=0)


def _worker_main(host: str, port: int) -> None:
    from gateway.config import load_config

    _logging()
    cfg = load_config()
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, host=host, port=port))
    _run(create_app(cfg), cfg, reuse_port=True, print_banner=False)


# -- the offline demo --------------------------------------------------------
def _serve_demo(cfg: Config) -> int:
    from gateway.mocknode import MockNodeOptions, start_mock_node

    tmp = tempfile.TemporaryDirectory(prefix="gateway-demo-")
    redis_proc = RedisProcess(Path(tmp.name), persist=False)
    url = redis_proc.start()
    if cfg.server.port == 8545 and not _port_free(cfg.server.host, cfg.server.port):
        log.warning("port 8545 is taken; pass --port")

    async def build() -> web.Application:
        nodes = [await start_mock_node(MockNodeOptions(chain_id=net.chain_id, block_time_s=1.0))
                 for net in cfg.networks]
        networks = tuple(dataclasses.replace(net, upstreams=(node.url,))
                         for net, node in zip(cfg.networks, nodes, strict=True))
        demo_cfg = dataclasses.replace(
            cfg, networks=networks, redis=dataclasses.replace(cfg.redis, url=url))
        app = create_app(demo_cfg)

        async def nodes_ctx(app: web.Application) -> AsyncIterator[None]:
            try:
                yield
            finally:
                for node in nodes:
                    await node.close()

        app.cleanup_ctx.append(nodes_ctx)
        app.on_startup.append(_demo_key)
        return app

    try:
        _run(build(), cfg, reuse_port=False)  # type: ignore[arg-type]
    finally:
        redis_proc.stop()
        tmp.cleanup()
    return 0


async def _demo_key(app: web.Application) -> None:
    cfg = app[T.CONFIG]
    store = app[T.STORE]
    acct = await store.create_account(DEMO_EMAIL, DEMO_PASSWORD, "free")
    key, _ = await store.create_key(acct.id, name="demo", env="development")
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    print(_demo_banner(base, key, cfg.networks), flush=True)


def _demo_banner(base: str, key: str, networks: tuple[NetworkConfig, ...]) -> str:
    body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    lines = ["", "rpc-gateway demo: embedded Redis, mock nodes for "
             + ", ".join(f"{n.name} (chain {n.chain_id})" for n in networks) + ".",
             f"Demo account: {DEMO_EMAIL} / {DEMO_PASSWORD}   dashboard: {base}/dashboard",
             f"Demo API key: {key}", "", "Try:",
             f"  export RPC_KEY={key}"]
    for net in networks:
        lines.append(f"  curl -s -X POST {base}{net.prefix}/$RPC_KEY "
                     f"-H 'Content-Type: application/json' -d '{body}'")
        lines.append(f"  curl -s -X POST {base}{net.prefix} -H \"Authorization: Bearer $RPC_KEY\" "
                     f"-H 'Content-Type: application/json' -d '{body}'")
    lines += ["", "Ctrl-C stops everything.", ""]
    return "\n".join(lines)


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock, contextlib.suppress(OSError):
        sock.bind((host, port))
        return True
    return False


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2], int(sys.argv[3]))
