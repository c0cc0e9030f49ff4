"""WebSocket fan-out: N sockets on ``newHeads`` through one gateway worker.

Measures what issue 14 asks: delivery latency from the node's emit to the
client's receive (p50/p99), upstream subscriptions the node holds (target: 1),
and the gateway's memory per socket (RSS after the sockets opened minus
before, over N), plus the gateway's CPU while blocks flow.

Self-contained: an embedded Redis, a mock WebSocket node (``gateway.mockws``,
headers stamped with their emit time) in this process, ``gateway serve`` as a
child process, and ``--procs`` client processes holding the sockets::

    python -m bench.scenarios.ws --sockets 10000 --procs 4 --rate 3 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

WS = (
    "N sockets subscribed to newHeads through one gateway worker: node-emit to client-receive "
    "latency (p50/p99), upstream subscriptions held, gateway RSS per socket "
    "(target: 10,000 sockets under 300 MB RSS, p99 under 50 ms at 3 blocks/s)."
)


# ---- client process -----------------------------------------------------------


async def _client(url: str, count: int, duration: float) -> None:
    """Open ``count`` sockets, subscribe each to newHeads, report latencies as JSON."""
    import aiohttp
    import orjson

    lat: list[float] = []
    errors: dict[str, int] = {}
    sub = b'{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}'
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        sockets: list[aiohttp.ClientWebSocketResponse] = []
        gate = asyncio.Semaphore(100)

        async def open_one() -> None:
            async with gate:
                try:
                    ws = await http.ws_connect(url, heartbeat=None, autoping=True)
                    await ws.send_bytes(sub)
                    answer = orjson.loads((await ws.receive(timeout=30)).data)
                    if "result" not in answer:
                        raise RuntimeError(str(answer.get("error")))
                    sockets.append(ws)
                except Exception as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

        await asyncio.gather(*(open_one() for _ in range(count)))
        print(json.dumps({"ready": len(sockets), "errors": errors}), flush=True)

        async def read(ws: aiohttp.ClientWebSocketResponse) -> None:
            async for msg in ws:
                now = time.time()
                head = orjson.loads(msg.data)["params"]["result"]
                lat.append(now - head["emittedAt"])

        readers = [asyncio.create_task(read(ws)) for ws in sockets]
        await asyncio.sleep(duration)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    lat.sort()
    print(json.dumps({"latencies": lat, "errors": errors}), flush=True)


# ---- the scenario ---------------------------------------------------------------


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
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

    from gateway.accounts import Store
    from gateway.embedded import RedisProcess, free_port
    from gateway.mockws import Chain, start_ws_node

    tmp = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    redis_proc = RedisProcess(tmp / "redis", persist=False)
    redis_proc.start()
    chains = {"bsc": Chain(56, stamp=True), "opbnb": Chain(204)}
    nodes = {name: await start_ws_node(chain) for name, chain in chains.items()}
    prefix = "bw" + secrets.token_hex(3)
    cfg = tmp / "gateway.toml"
    cfg.write_text(
        f'[redis]\nurl = "{redis_proc.url}"\nprefix = "{prefix}"\n'
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
        upstream = nodes["bsc"].subscriptions("newHeads")
        cpu0, t0 = _cpu_s(gw.pid), time.monotonic()
        head0 = chains["bsc"].head
        chains["bsc"].block_time_s = 1.0 / args.rate
        chains["bsc"].start()
        await asyncio.sleep(args.duration)
        await chains["bsc"].stop()
        cpu = (_cpu_s(gw.pid) - cpu0) / (time.monotonic() - t0)
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
            "gateway CPU while blocks flow (% of one core)": round(cpu * 100, 1),
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        }
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
    parser = argparse.ArgumentParser(prog="python -m bench.scenarios.ws", description=WS)
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--rate", type=float, default=3.0, help="blocks per second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of blocks")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: be a client process
    args = parser.parse_args(argv)
    if args.client:
        asyncio.run(_client(args.client, args.sockets, args.duration))
        return 0
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
