"""``gateway serve``: one process, N SO_REUSEPORT workers, or the offline demo."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config, NetworkConfig, data_dir
from gateway.embedded import RedisProcess, ensure_embedded
from gateway.metrics import MULTIPROC_ENV, multiprocess_dir
from gateway.server import serve_app

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
    logging.basicConfig(
        level=os.environ.get("GATEWAY_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def serve(
    cfg: Config,
    *,
    demo: bool = False,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
) -> int:
    _logging()
    server = dataclasses.replace(
        cfg.server,
        host=host or cfg.server.host,
        port=cfg.server.port if port is None else port,
        workers=workers or cfg.server.workers,
    )
    cfg = dataclasses.replace(cfg, server=server)
    if demo:
        return _serve_demo(cfg)
    embedded: RedisProcess | None = None
    if not cfg.redis.url:
        url, embedded = ensure_embedded(data_dir(cfg))
        cfg = dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, url=url))
    try:
        if server.workers <= 1:
            _run(create_app(cfg), cfg)
            return 0
        return _supervise(cfg)
    finally:
        if embedded is not None:
            embedded.stop()


def _run(
    app: web.Application | Awaitable[web.Application],
    cfg: Config,
    *,
    reuse_port: bool = False,
    print_banner: bool = True,
) -> None:
    """Serve one app in this process until SIGINT/SIGTERM, then drain (server.py)."""

    _raise_open_files(cfg.server.max_connections + _SPARE_FILES)

    async def main() -> None:
        built = app if isinstance(app, web.Application) else await app
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
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
        await serve_app(built, cfg.server.host, cfg.server.port, reuse_port=reuse_port, ready=ready)

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


def _supervise(cfg: Config) -> int:
    """Start N worker processes on one port (SO_REUSEPORT) and keep them running.

    Workers get the parent's exact config (JSON in ``GATEWAY_WORKER_CONFIG``)
    and a shared ``PROMETHEUS_MULTIPROC_DIR`` so that any worker's
    ``/metrics`` reports all of them. A worker that dies is restarted (unless
    they keep dying at once); SIGINT/SIGTERM are passed on to every worker,
    which then drains, and the supervisor exits when all have.
    """
    metrics_dir, own_dir = multiprocess_dir(), False
    if metrics_dir is None:
        metrics_dir, own_dir = tempfile.mkdtemp(prefix="gateway-metrics-"), True
    else:  # an operator's directory: start from zero, as prometheus-client asks
        for stale in Path(metrics_dir).glob("*.db"):
            stale.unlink(missing_ok=True)
    env = {
        **os.environ,
        "GATEWAY_WORKER_CONFIG": orjson.dumps(config_to_raw(cfg)).decode(),
        MULTIPROC_ENV: metrics_dir,
    }
    cmd = [sys.executable, "-m", "gateway.serve", "--worker"]
    procs: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []
    starts: list[float] = []

    def spawn() -> None:
        starts.append(time.monotonic())
        procs.append(subprocess.Popen(cmd, env=env))

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        for _ in range(cfg.server.workers):
            spawn()
        print(
            f"======== {len(procs)} workers on http://{cfg.server.host}:{cfg.server.port} ========",
            flush=True,
        )
        while procs:
            time.sleep(0.2)
            for proc in [p for p in procs if p.poll() is not None]:
                procs.remove(proc)
                _mp_dead(proc.pid, metrics_dir)
                if stopping:
                    code = max(code, proc.returncode or 0)
                    continue
                recent = [t for t in starts if time.monotonic() - t < 30]
                if len(recent) > 2 * cfg.server.workers:
                    log.error("workers keep dying; stopping (last exit code %s)", proc.returncode)
                    forward(signal.SIGTERM, None)
                    code = 1
                    continue
                log.warning(
                    "worker exited pid=%s code=%s; starting another", proc.pid, proc.returncode
                )
                spawn()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for proc in procs:  # only if the loop itself failed
            proc.kill()
            proc.wait()
        if own_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return code


def _mp_dead(pid: int, path: str) -> None:
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def config_to_raw(cfg: Config) -> dict[str, Any]:
    """``cfg`` in the TOML shape ``config_from_dict`` reads (for worker processes)."""

    def plain(value: Any) -> Any:
        if isinstance(value, frozenset):
            return sorted(value)
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    def table(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            f.name: plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name not in skip
        }

    raw: dict[str, Any] = {
        name: table(getattr(cfg, name))
        for name in ("server", "limits", "redis", "upstream", "dashboard")
    }
    raw["networks"] = {n.name: table(n, ("name",)) for n in cfg.networks}
    raw["plans"] = {p.name: table(p, ("name",)) for p in cfg.plans}
    raw["default_plan"] = cfg.default_plan
    return raw


def _worker_main() -> None:
    from gateway.config import config_from_dict, load_config

    _logging()
    blob = os.environ.get("GATEWAY_WORKER_CONFIG")
    cfg = config_from_dict(orjson.loads(blob), {}) if blob else load_config()
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
        nodes = [
            await start_mock_node(MockNodeOptions(chain_id=net.chain_id, block_time_s=1.0))
            for net in cfg.networks
        ]
        networks = tuple(
            dataclasses.replace(net, upstreams=(node.url,))
            for net, node in zip(cfg.networks, nodes, strict=True)
        )
        demo_cfg = dataclasses.replace(
            cfg, networks=networks, redis=dataclasses.replace(cfg.redis, url=url)
        )
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
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    print(_demo_banner(base, key, cfg.networks), flush=True)


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
    lines += ["", "Ctrl-C stops everything.", ""]
    return "\n".join(lines)


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock, contextlib.suppress(OSError):
        sock.bind((host, port))
        return True
    return False


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
