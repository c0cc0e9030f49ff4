"""Worker CPU of the transaction path: the largest bundle allowed, a batch of 50 raw sends.

Starts a Redis, one mock node (``bench.mocknode``, its own process), one
mock builder (in this process) and ``gateway serve`` (one worker, its own
process), then sends ``--rounds`` bundles of ``tx_bundle_max`` (50)
transactions of 50 senders each, and as many JSON-RPC batches of 50
``eth_sendRawTransaction`` on the private route, every transaction freshly
signed (eth-account) before the clock starts. The gateway process's CPU
(``/proc/<pid>/stat`` user + system) is read before and after each phase.
The builder never includes what it takes, so every transaction sent is
still followed at the end: the gateway's CPU over 10 s with them all
followed, against 10 s before any was sent, is what following costs.

    python -m bench.micro.txcost [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from argon2 import PasswordHasher
from redis.asyncio import Redis

from gateway.demo.mockbuilder import start_mock_builder
from gateway.redis.embedded import LOOPBACK, RedisProcess, free_port
from gateway.store.accounts import Store

JSON = {"Content-Type": "application/json"}
IDLE_S = 10.0
TRACK_INTERVAL_S = 1.0  # tx_track_interval_s, the default
CONFIG = """
[redis]
prefix = "txcost"
[plans.free]
rate = 1000000
burst = 1000000
private_tx = "on"
bundle_rate = 1000
bundle_burst = 1000
[networks.bsc]
upstreams = ["{node}"]
private_tx = ["{builder}"]
[networks.opbnb]
upstreams = ["{node204}"]
[server]
access_log = false
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _node(chain_id: int) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, "-m", "bench.mocknode", "--chain-id", str(chain_id)]
    cmd += ["--host", LOOPBACK, "--port", "0", "--block-time", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().decode().strip()


async def _idle_cpu(pid: int, seconds: float) -> float:
    """The gateway's CPU seconds over ``seconds`` of no calls (its background work)."""
    before = _cpu_s(pid)
    await asyncio.sleep(seconds)
    return _cpu_s(pid) - before


def _serve(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _signed(rounds: int) -> tuple[list[list[str]], list[list[str]]]:
    from tests.helpers.txs import sender_account, signed

    bundles = [
        [signed(sender_account(10_000 + r * 50 + i)) for i in range(50)] for r in range(rounds)
    ]
    batches = [
        [signed(sender_account(50_000 + r * 50 + i)) for i in range(50)] for r in range(rounds)
    ]
    return bundles, batches


async def main(rounds: int) -> None:
    bundles, batches = _signed(rounds)
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(Path(tmp), persist=False) as rp:
        url = rp.start()
        builder = await start_mock_builder(56)
        node, node_url = _node(56)
        node204, node204_url = _node(204)
        cfg = Path(tmp) / "gateway.toml"
        cfg.write_text(CONFIG.format(node=node_url, node204=node204_url, builder=builder.url))
        port = free_port()
        env = {**os.environ, "GATEWAY_REDIS_URL": url, "GATEWAY_CONFIG": str(cfg)}
        gw = _serve(port, env)
        try:
            redis = Redis.from_url(url, decode_responses=True)
            store = Store(
                redis,
                prefix="txcost",
                hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1),
            )
            acct = await store.create_account("bench@example.com", "correct horse battery")
            key, _ = await store.create_key(acct.id, name="bench")
            base = f"http://{LOOPBACK}:{port}/bsc/{key}"
            async with aiohttp.ClientSession() as session:

                async def post(body: Any) -> Any:
                    async with session.post(base, data=orjson.dumps(body), headers=JSON) as resp:
                        return orjson.loads(await resp.read())

                deadline = time.monotonic() + 60
                while True:
                    try:
                        await post({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})
                        break
                    except aiohttp.ClientError:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.2)
                idle = await _idle_cpu(gw.pid, IDLE_S)
                for name, bodies in (
                    (
                        "bundle of 50 (50 senders)",
                        [
                            {
                                "jsonrpc": "2.0",
                                "id": 1,
                                "method": "eth_sendBundle",
                                "params": [{"txs": b}],
                            }
                            for b in bundles
                        ],
                    ),
                    (
                        "batch of 50 eth_sendRawTransaction",
                        [
                            [
                                {
                                    "jsonrpc": "2.0",
                                    "id": i,
                                    "method": "eth_sendRawTransaction",
                                    "params": [raw],
                                }
                                for i, raw in enumerate(b)
                            ]
                            for b in batches
                        ],
                    ),
                ):
                    cpu0, wall0 = _cpu_s(gw.pid), time.perf_counter()
                    for body in bodies:
                        answer = await post(body)
                        bad = [
                            a
                            for a in (answer if isinstance(answer, list) else [answer])
                            if "error" in a
                        ]
                        assert not bad, bad[:1]
                    cpu, wall = _cpu_s(gw.pid) - cpu0, time.perf_counter() - wall0
                    print(
                        f"{name}: {cpu * 1000 / rounds:.1f} ms worker CPU per call "
                        f"({rounds} calls, {wall * 1000 / rounds:.1f} ms wall per call)"
                    )
                followed = 2 * 50 * rounds  # the builder never includes: all still followed
                busy = await _idle_cpu(gw.pid, IDLE_S)
                per = (busy - idle) / (IDLE_S / TRACK_INTERVAL_S) / followed
                print(
                    f"following {followed} private transactions: {busy * 1000 / IDLE_S:.1f} ms "
                    f"CPU per s (idle: {idle * 1000 / IDLE_S:.1f}), {per * 1e6:.1f} us per "
                    "transaction per look-up round"
                )
            await redis.aclose()
        finally:
            for proc in (gw, node, node204):
                proc.terminate()
                proc.wait(10)
            await builder.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args().rounds))
