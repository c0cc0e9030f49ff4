"""compose.yaml's topology as plain processes: three replicas, one Redis, a balancer.

Three ``gateway serve`` processes share one Redis and two
``python -m bench.mocknode`` nodes, behind a round-robin balancer that
health-checks ``/readyz`` (tests/helpers/balancer.py stands in for HAProxy).
The gateway keeps no per-process state that matters for these answers, so
one key's plan limit holds across all replicas together and a revoke is
seen by every replica on its next request.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from gateway.redis.embedded import LOOPBACK, RedisProcess, free_port
from gateway.redis.keyspace import bucket_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.balancer import Backend, Balancer
from tests.helpers.procs import gateway_processes, mock_node_process

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 3
RATE, BURST = 200, 100  # the "free" plan of this test: 200 requests/s, burst 100
LOAD_S = 2.0
CONNECTIONS = 24  # spread by the balancer: 8 keep-alive connections per replica
BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Stack:
    ports: list[int]
    prefix: str
    metrics_ports: list[int]


@pytest.fixture(scope="module")
def stack(redis_server: RedisProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prefix = "so" + secrets.token_hex(4)
    with ExitStack() as es:
        bsc = es.enter_context(mock_node_process(56))
        opbnb = es.enter_context(mock_node_process(204))
        cfg = tmp_path_factory.mktemp("scaleout") / "gateway.toml"
        cfg.write_text(
            f'[redis]\nprefix = "{prefix}"\n'
            f"[plans.free]\nrate = {RATE}\nburst = {BURST}\n"
            "[plans.payg]\nrate = 1000000\nburst = 1000000\n"
            f'[networks.bsc]\nupstreams = ["{bsc}"]\n'
            f'[networks.opbnb]\nupstreams = ["{opbnb}"]\n'
            "[server]\naccess_log = false\n"
            "[upstream]\nprobe_interval_s = 0.5\n"
        )
        metrics_ports: list[int] = []
        ports = es.enter_context(
            gateway_processes(
                REPLICAS, Path(cfg), {"GATEWAY_REDIS_URL": redis_server.url}, metrics_ports
            )
        )
        yield Stack(ports, prefix, metrics_ports)


@pytest.fixture
async def stack_store(stack: Stack, redis: Redis) -> Store:
    return Store(redis, prefix=stack.prefix)


@pytest.fixture
async def balancer(stack: Stack) -> AsyncIterator[Balancer]:
    async with Balancer([Backend(LOOPBACK, p) for p in stack.ports]) as lb:
        yield lb


async def requests_served(
    session: aiohttp.ClientSession, port: int, name: str = "gateway_requests_total"
) -> float:
    """``name`` (``gateway_requests_total``) summed over labels, from one replica's
    metrics port."""
    async with session.get(f"http://{LOOPBACK}:{port}/metrics") as resp:
        text = await resp.text()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")
    )


@pytest.mark.slow
async def test_one_keys_limit_holds_across_three_replicas(
    stack: Stack, stack_store: Store, balancer: Balancer, redis: Redis
) -> None:
    acct = await stack_store.create_account(
        f"lb-{secrets.token_hex(3)}@example.com", "a long password", "free"
    )
    key, rec = await stack_store.create_key(acct.id)
    url = f"{balancer.url}/bsc/{key}"
    statuses: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    warm_acct = await stack_store.create_account(
        f"w-{secrets.token_hex(3)}@example.com", "a long password", "payg"
    )
    warm_key, _ = await stack_store.create_key(warm_acct.id)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Open every keep-alive connection first (with another key), so that
        # the burst below is not spent waiting for TCP handshakes.
        async def warm() -> None:
            async with session.post(
                f"{balancer.url}/bsc/{warm_key}", data=BODY, headers=JSON
            ) as resp:
                assert resp.status == 200

        await asyncio.gather(*(warm() for _ in range(CONNECTIONS)))
        before = [await requests_served(session, p) for p in stack.metrics_ports]
        # One request alone: the Redis time of the first admission, t0.
        client_start = time.monotonic()
        async with session.post(url, data=BODY, headers=JSON) as resp:
            assert resp.status == 200
            statuses[resp.status] += 1
        t0 = (await stack_store.get_key(rec.id)).last_used_at
        deadline = time.monotonic() + LOAD_S

        async def worker() -> None:
            while time.monotonic() < deadline:
                async with session.post(url, data=BODY, headers=JSON) as resp:
                    await resp.read()
                    statuses[resp.status] += 1

        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
        client_s = time.monotonic() - client_start
        t1 = (await stack_store.get_key(rec.id)).last_used_at  # the last admission
        left = float(await redis.hget(bucket_key(stack.prefix, key_hash(key)), "t") or 0)
        after = [await requests_served(session, p) for p in stack.metrics_ports]
        waits = "gateway_admission_wait_seconds_count"
        waited = [await requests_served(session, p, waits) for p in stack.metrics_ports]

    assert t0 is not None and t1 is not None
    assert set(statuses) <= {200, 429}, statuses
    admitted = statuses[200]
    # By the Redis clock, from the first admission to the last.
    theoretical = BURST + RATE * (t1 - t0) / 1000
    # By the client clock: longer than Redis saw (it includes latency), so looser.
    loose = BURST + RATE * client_s
    served = [a - b for a, b in zip(after, before, strict=True)]
    print(
        f"\nscale-out: {sum(statuses.values())} requests in {client_s:.2f} s through the "
        f"balancer, {admitted} admitted; theoretical {theoretical:.1f} over "
        f"{(t1 - t0) / 1000:.3f} s of Redis time (ratio {admitted / theoretical:.4f}; "
        f"{left:.2f} tokens left at the end), {loose:.1f} by the client clock (ratio "
        f"{admitted / loose:.4f}); served per replica {served}; connections "
        f"{dict(balancer.connections)}"
    )
    assert 0.98 <= admitted / theoretical <= 1.0
    assert admitted <= loose
    # the load really was over the limit: calls waited for the bucket, or were refused
    assert statuses[429] > 0 or sum(waited) > 0, waited
    assert all(n > 0 for n in served), served  # every replica took part


@pytest.mark.slow
async def test_revoke_reaches_every_replica_within_a_second(
    stack: Stack, stack_store: Store
) -> None:
    acct = await stack_store.create_account(
        f"rv-{secrets.token_hex(3)}@example.com", "a long password", "payg"
    )
    key, rec = await stack_store.create_key(acct.id)
    revoked_at: float | None = None
    warmed, settled = asyncio.Event(), asyncio.Event()
    # per replica: (send time, answer time, status) of every request
    log: dict[int, list[tuple[float, float, int]]] = {p: [] for p in stack.ports}

    async def poll(session: aiohttp.ClientSession, port: int) -> None:
        url = f"http://{LOOPBACK}:{port}/bsc/{key}"
        while not settled.is_set():
            sent = time.monotonic()
            async with session.post(url, data=BODY, headers=JSON) as resp:
                await resp.read()
                log[port].append((sent, time.monotonic(), resp.status))
            if all(sum(1 for *_, s in e if s == 200) >= 5 for e in log.values()):
                warmed.set()
            if revoked_at is not None and all(
                any(s == 401 for _, _, s in entries) for entries in log.values()
            ):
                settled.set()

    async with aiohttp.ClientSession() as session:
        pollers = [asyncio.create_task(poll(session, p)) for p in stack.ports]
        await asyncio.wait_for(warmed.wait(), timeout=5)
        start = time.monotonic()
        await stack_store.revoke_key(rec.id)
        revoked_at = time.monotonic()
        try:
            await asyncio.wait_for(settled.wait(), timeout=5)
        finally:
            settled.set()
            await asyncio.gather(*pollers)

    latencies = {}
    for port, entries in log.items():
        first_401 = next(done for _, done, s in entries if s == 401)
        latencies[port] = first_401 - start
        late = [s for sent, _, s in entries if sent >= revoked_at and s != 401]
        assert not late, f"replica {port} admitted a revoked key: {late}"
    print(
        f"\nrevoke: store call {1000 * (revoked_at - start):.1f} ms; first 401 per replica "
        + ", ".join(f"{1000 * v:.1f} ms" for v in latencies.values())
    )
    assert max(latencies.values()) < 1.0


@dataclass(frozen=True)
class HAProxy:
    front: int  # the RPC frontend
    stats: int  # the status page with /metrics
    log: Path


@pytest.fixture
def haproxy(stack: Stack, tmp_path: Path) -> Iterator[HAProxy]:
    """deploy/haproxy.cfg run by a real HAProxy, its addresses moved to loopback."""
    cfg = (ROOT / "deploy" / "haproxy.cfg").read_text()
    for i, port in enumerate(stack.ports, 1):
        cfg = cfg.replace(f"gateway-{i}:8545", f"{LOOPBACK}:{port}")
    cfg = re.sub(r"resolvers docker\n(    .*\n)+", "", cfg.replace(" resolvers docker", ""))
    ha = HAProxy(free_port(), free_port(), tmp_path / "haproxy.log")
    cfg = cfg.replace("bind :8545", f"bind {LOOPBACK}:{ha.front}")
    cfg = cfg.replace("bind :8404", f"bind {LOOPBACK}:{ha.stats}")
    (tmp_path / "haproxy.cfg").write_text(cfg)
    with open(ha.log, "wb") as log:
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield ha
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
async def test_compose_haproxy_config_balances_the_replicas(
    haproxy: HAProxy, stack_store: Store
) -> None:
    acct = await stack_store.create_account(
        f"ha-{secrets.token_hex(3)}@example.com", "a long password", "payg"
    )
    key, _ = await stack_store.create_key(acct.id)
    statuses = Counter[int]()
    async with aiohttp.ClientSession() as session:

        async def servers_up() -> int:
            try:
                async with session.get(f"http://{LOOPBACK}:{haproxy.stats}/metrics") as resp:
                    text = await resp.text()
            except aiohttp.ClientError:
                return 0
            return sum(
                1
                for line in text.splitlines()
                if line.startswith("haproxy_server_check_status{")
                and 'proxy="gateways"' in line
                and 'state="L7OK"' in line
                and line.endswith(" 1")
            )

        for _ in range(150):  # until every replica passed a /readyz check
            if await servers_up() == REPLICAS:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("HAProxy never saw every replica ready")
        for _ in range(30):
            async with session.post(
                f"http://{LOOPBACK}:{haproxy.front}/bsc/{key}", data=BODY, headers=JSON
            ) as resp:
                await resp.read()
                statuses[resp.status] += 1
    lines = [ln for ln in haproxy.log.read_text().splitlines() if " rpc " in ln]
    served = Counter(ln.split()[3] for ln in lines)  # "gateways/gateway-N"
    assert statuses == Counter({200: 30})
    assert len(served) == REPLICAS, served  # every replica took requests
    assert all(" POST /bsc 200 " in ln for ln in lines) and key not in "\n".join(lines)
