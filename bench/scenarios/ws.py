"""WebSocket fan-out: N sockets on ``newHeads`` through one gateway worker.

Measures delivery latency from the node's emit to the
client's receive (p50/p99), upstream subscriptions the node holds (target: 1),
and the gateway's memory per socket (RSS after the sockets opened minus
before, over N), plus the gateway's CPU while blocks flow.

Self-contained: an embedded Redis, a mock WebSocket node (``gateway.demo.mockws``,
headers stamped with their emit time) in this process, ``gateway serve`` as a
child process, and ``--procs`` client processes holding the sockets::

    python -m bench ws --sockets 10000 --procs 4 --rate 3 --duration 20

(``python -m bench.scenarios.ws`` is the same.) The gateway is pinned to the
first half of the CPUs and everything else (this process with the mock node,
Redis, the client processes) to the other half, as in every other scenario,
so the gateway's CPU per delivered notification is its own. Each socket is a
file descriptor on both sides: the open-files limit is raised to the hard
limit in this process (inherited by the gateway and the clients), and a run
the hard limit cannot hold stops before it starts, saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.scenarios.wsclient import LeanSocket

WS = (
    "N sockets subscribed to newHeads through one gateway worker: node-emit to client-receive "
    "latency (p50/p99), upstream subscriptions held, gateway RSS per socket "
    "(target: 10,000 sockets under 300 MB RSS, p99 under 50 ms at 3 blocks/s)."
)


# ---- client process -----------------------------------------------------------


async def _client(url: str, count: int, duration: float) -> None:
    """Open ``count`` lean sockets on newHeads; print readiness, then latencies (JSON)."""
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lat: list[float] = []
    errors: dict[str, int] = {}
    transports: list[asyncio.BaseTransport] = []
    gate = asyncio.Semaphore(100)

    async def open_one() -> None:
        async with gate:
            ready: asyncio.Future[str] = loop.create_future()
            try:
                transport, _ = await loop.create_connection(
                    lambda: LeanSocket(parts.path, f"{host}:{port}", lat, ready), host, port
                )
                transports.append(transport)
                why = await asyncio.wait_for(ready, 30)
                if why:  # "" = subscribed; else why not (HTTP status, error answer)
                    errors[why] = errors.get(why, 0) + 1
            except (OSError, TimeoutError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    await asyncio.gather(*(open_one() for _ in range(count)))
    failed = sum(errors.values())
    print(json.dumps({"ready": count - failed, "errors": errors}), flush=True)
    await asyncio.sleep(duration)
    for transport in transports:
        transport.close()
    lat.sort()
    print(json.dumps({"latencies": lat, "errors": errors}), flush=True)


# ---- the scenario ---------------------------------------------------------------

_SPARE_FDS = 256  # the gateway's own files: Redis, the node, the listener, logs, slack


def raise_nofile(need: int) -> tuple[int, int]:
    """Raise this process's open-files soft limit towards ``need`` (at most the hard limit).

    Children (the gateway, the client processes) inherit it. Returns the
    (soft, hard) limits now in force; the soft limit is never lowered.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):  # e.g. a container's cap below its reported hard limit
            return soft, hard
        soft = want
    return soft, hard


def fd_budget(sockets: int, procs: int) -> int:
    """Open files the busiest process of a run needs: the gateway holds every socket."""
    return max(sockets, -(-sockets // max(1, procs))) + _SPARE_FDS


def _verdict(report: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The issue's targets, as flags: p99 delivery, peak RSS, every notification delivered."""
    from bench import verdicts as v

    p99, rss = report["latency p99 (ms)"], report["gateway peak RSS (MB)"]
    got, want = report["notifications received"], report["notifications expected"]
    cpu = report["gateway CPU per delivered notification (µs)"]
    checks = [
        v.check(f"p99 delivery <= {args.max_p99_ms:g} ms", p99 <= args.max_p99_ms, f"{p99} ms"),
        v.check(f"gateway peak RSS <= {args.max_rss_mb:g} MB", rss <= args.max_rss_mb, f"{rss} MB"),
        v.check(
            "every socket opened",
            report["sockets opened"] == args.sockets,
            f"{report['sockets opened']} of {args.sockets}",
        ),
        v.check("every notification delivered", got == want > 0, f"{got} of {want}"),
    ]
    if args.max_cpu_us > 0:
        checks.append(
            v.check(
                f"gateway CPU per notification <= {args.max_cpu_us:g} µs",
                cpu is not None and cpu <= args.max_cpu_us,
                f"{cpu} µs",
            )
        )
    return v.verdict(checks)


def _rss_kb(pid: int, field: str = "VmRSS:") -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from redis.asyncio import Redis

    from bench.stack import cpu_plan
    from gateway.demo.mockws import Chain, start_ws_node
    from gateway.redis.embedded import RedisProcess, free_port
    from gateway.store.accounts import Store

    need = fd_budget(args.sockets, args.procs)
    soft, hard = raise_nofile(need)
    if soft < need:
        raise SystemExit(
            f"bench ws: {args.sockets} sockets need about {need} open files per process; "
            f"the limit is {soft} (hard {hard}): raise it (ulimit -n) or use fewer --sockets"
        )
    plan = cpu_plan(not args.no_pin)
    if plan.others is not None:  # Redis, the node (here) and the clients inherit this
        os.sched_setaffinity(0, plan.others)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    redis_proc = RedisProcess(tmp / "redis", persist=False)
    redis_proc.start()
    chains = {"bsc": Chain(56, stamp=True), "opbnb": Chain(204)}
    nodes = {name: await start_ws_node(chain) for name, chain in chains.items()}
    prefix = "bw" + secrets.token_hex(3)
    cfg = tmp / "gateway.toml"
    cfg.write_text(
        # Opening 10,000 sockets at once on a small machine queues admissions
        # behind each other: allow them 2 s instead of the 250 ms fail-closed
        # default, so the run measures fan-out rather than a refused burst.
        f'[redis]\nurl = "{redis_proc.url}"\nprefix = "{prefix}"\ntimeout_ms = 2000\n'
        "[server]\naccess_log = false\nmax_connections = 0\n"
        "[dashboard]\nenabled = false\n"
        f"[ws]\nmax_sockets_per_key = {args.sockets + 10}\nheartbeat_s = 60.0\n"
        "[plans.payg]\nrate = 10000000\nburst = 10000000\n"
        f'[networks.bsc]\nupstreams = ["{nodes["bsc"].url}"]\n'
        f'[networks.opbnb]\nupstreams = ["{nodes["opbnb"].url}"]\n'
    )
    redis = Redis.from_url(redis_proc.url, decode_responses=True)
    store = Store(redis, prefix=prefix)
    account = await store.create_account("bench@example.com", "bench password", "payg")
    key, _ = await store.create_key(account.id, name="bench-ws")
    port = free_port()
    env = {**os.environ, "GATEWAY_CONFIG": str(cfg)}
    gw = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(port)),
        env=env,
        stdout=subprocess.DEVNULL,
    )
    if plan.server is not None:
        os.sched_setaffinity(gw.pid, plan.server)
    clients: list[asyncio.subprocess.Process] = []
    try:
        await _wait_ready(port, gw)
        rss_before = _rss_kb(gw.pid)
        per = [
            args.sockets // args.procs + (i < args.sockets % args.procs) for i in range(args.procs)
        ]
        url = f"ws://127.0.0.1:{port}/bsc/{key}"
        for count in per:
            clients.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bench.scenarios.ws",
                    "--client",
                    url,
                    "--sockets",
                    str(count),
                    "--duration",
                    str(args.duration + 2),
                    stdout=subprocess.PIPE,
                    limit=1 << 28,  # the latencies come back as one JSON line
                )
            )
        opened, open_errors = 0, dict[str, int]()
        started = time.monotonic()
        for proc in clients:
            assert proc.stdout is not None
            ready = json.loads(await proc.stdout.readline())
            opened += ready["ready"]
            for k, n in ready["errors"].items():
                open_errors[k] = open_errors.get(k, 0) + n
        open_s = time.monotonic() - started
        await asyncio.sleep(1.0)
        rss_after = _rss_kb(gw.pid)
        # less the gateway's own head subscription (upstream.ws_heads, one per node)
        upstream = nodes["bsc"].subscriptions("newHeads") - 1
        cpu0, t0 = _cpu_s(gw.pid), time.monotonic()
        client_cpu0 = sum(_cpu_s(c.pid) for c in clients)
        head0 = chains["bsc"].head
        chains["bsc"].block_time_s = 1.0 / args.rate
        chains["bsc"].start()
        await asyncio.sleep(args.duration)
        await chains["bsc"].stop()
        await asyncio.sleep(0.5)  # the last block's notifications are still on their way
        gw_cpu_s = _cpu_s(gw.pid) - cpu0
        client_cpu_s = sum(_cpu_s(c.pid) for c in clients) - client_cpu0
        cpu = gw_cpu_s / (time.monotonic() - t0)
        rss_peak = _rss_kb(gw.pid, "VmHWM:")
        blocks = chains["bsc"].head - head0
        lat: list[float] = []
        for proc in clients:
            assert proc.stdout is not None
            out = json.loads(await proc.stdout.readline())
            lat.extend(out["latencies"])
            await proc.wait()
        lat.sort()
        report = {
            "scenario": "ws",
            "sockets": args.sockets,
            "sockets opened": opened,
            "open errors": open_errors,
            "open time (s)": round(open_s, 1),
            "blocks/s": args.rate,
            "blocks": blocks,
            "notifications received": len(lat),
            "notifications expected": opened * blocks,
            "latency p50 (ms)": round(_pct(lat, 0.50) * 1000, 2),
            "latency p99 (ms)": round(_pct(lat, 0.99) * 1000, 2),
            "latency max (ms)": round(lat[-1] * 1000, 2) if lat else None,
            "upstream subscriptions held": upstream,
            "gateway RSS before (MB)": round(rss_before / 1024, 1),
            "gateway RSS with sockets (MB)": round(rss_after / 1024, 1),
            "RSS per socket (KB)": round((rss_after - rss_before) / max(1, opened), 2),
            "gateway peak RSS (MB)": round(rss_peak / 1024, 1),
            "gateway CPU while blocks flow (% of one core)": round(cpu * 100, 1),
            "gateway CPU per delivered notification (µs)": (
                round(gw_cpu_s * 1e6 / len(lat), 2) if lat else None
            ),
            "client CPU per delivered notification (µs)": (
                round(client_cpu_s * 1e6 / len(lat), 2) if lat else None
            ),
            "open-files limit (soft/hard)": f"{soft}/{hard}",
            "pinning": plan.describe(),
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        }
        report["verdict"] = _verdict(report, args)
        return report
    finally:
        for proc in clients:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        gw.terminate()
        await asyncio.wait_for(gw.wait(), 30)
        for node in nodes.values():
            await node.close()
        await redis.aclose()
        redis_proc.stop()


async def _wait_ready(port: int, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}")
        try:
            await asyncio.to_thread(
                urllib.request.urlopen, f"http://127.0.0.1:{port}/healthz", timeout=0.5
            )
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError("gateway did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ws", description=WS)
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--rate", type=float, default=3.0, help="blocks per second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of blocks")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--no-pin", action="store_true", help="do not pin gateway and clients")
    parser.add_argument("--max-p99-ms", type=float, default=50.0, help="verdict: p99 delivery")
    parser.add_argument("--max-rss-mb", type=float, default=300.0, help="verdict: peak RSS")
    parser.add_argument(
        "--max-cpu-us",
        type=float,
        default=0.0,
        help="verdict: gateway CPU per delivered notification (0: report only; the goal is 2)",
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: be a client process
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    if args.client:
        asyncio.run(_client(args.client, args.sockets, args.duration))
        return 0
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if report["verdict"]["pass"] is False else 0


if __name__ == "__main__":
    sys.exit(main())
