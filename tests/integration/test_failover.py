"""Redis Cluster failover under steady traffic: the gateway recovers without a restart.

A cluster of three primaries, each with one replica (cluster-node-timeout
1 s), serves the real app. Two keys live on different primaries; each gets a
steady stream of requests. The primary of the first key is then failed over
three ways: a coordinated ``CLUSTER FAILOVER`` on its replica (no request
may fail); a SIGKILL (requests for that shard fail, fast and with a 503,
until the replica is promoted; the other shard never notices; the promoted
node's script cache is flushed on top, so the first admission there answers
NOSCRIPT and redis-py loads the script again); and a SIGSTOP with many calls
in flight to the hung node (they wait out their timeout, but the per-node
connection gate keeps them from starving the healthy shard). The numbers
are printed. The nodes run with ``cluster-require-full-coverage no``, as
docs/DEPLOYING.md recommends: with Redis's default, every shard refuses
queries (CLUSTERDOWN) while one has no primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers import cluster_fixtures as _cf
from tests.helpers.cluster import ClusterNode
from tests.helpers.cluster import RedisCluster as ClusterProcesses
from tests.helpers.config import Client, MakeConfig
from tests.helpers.waiting import eventually

redis_url, redis, make_config = _cf.redis_url, _cf.redis, _cf.make_config

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}
NODE_TIMEOUT_MS = 1000
RECOVERY_BOUND_S = 6.0  # failure detection (~2 x node timeout) + election, with margin
PACE_S = 0.005  # one request per 5 ms per key: ~200 requests/s each


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    cluster = ClusterProcesses(
        tmp_path_factory.mktemp("failover"),
        primaries=3,
        replicas=1,
        node_timeout_ms=NODE_TIMEOUT_MS,
    ).start()
    yield cluster
    cluster.stop()


@dataclass
class Traffic:
    """Steady requests for one key; every answer logged as (time, status, body)."""

    client: Client
    key: str
    pace_s: float = PACE_S
    log: list[tuple[float, int, bytes]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while not self.stop.is_set():
            resp = await self.client.post(f"/bsc/{self.key}", data=CALL, headers=JSON)
            self.log.append((time.monotonic(), resp.status, await resp.read()))
            await asyncio.sleep(self.pace_s)

    def failures(self, since: float = 0.0) -> list[tuple[float, int, bytes]]:
        return [e for e in self.log if e[0] >= since and e[1] != 200]

    def ok_after(self, t: float) -> int:
        return sum(1 for at, status, _ in self.log if at > t and status == 200)


async def keys_on_two_shards(
    store: Store, cluster: ClusterProcesses, prefix: str
) -> tuple[str, str, ClusterNode]:
    """A key whose primary has a live replica, and a key on another primary.

    (An earlier test may have killed a replica-less shard's only spare.)
    """
    acct = await store.create_account(
        f"fo-{secrets.token_hex(3)}@example.com", "a long password", "payg"
    )
    while True:
        key_a, _ = await store.create_key(acct.id)
        primary_a = cluster.primary_for(record_key(prefix, key_hash(key_a)))
        with contextlib.suppress(LookupError):
            cluster.replica_of(primary_a)
            break
    while True:
        key_b, _ = await store.create_key(acct.id)
        if cluster.primary_for(record_key(prefix, key_hash(key_b))) is not primary_a:
            return key_a, key_b, primary_a


@pytest.fixture
async def app_client(make_config: MakeConfig, aiohttp_client: Callable[..., Any]) -> Client:
    cfg = make_config(
        {
            "plans": {"payg": {"rate": 1_000_000, "burst": 1_000_000}},
            "redis": {"timeout_ms": 250},  # the production default: a hung node fails fast
        }
    )
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    return client


async def drive(
    client: Client, key_a: str, key_b: str
) -> tuple[Traffic, Traffic, list[asyncio.Task[None]]]:
    a, b = Traffic(client, key_a), Traffic(client, key_b)
    tasks = [asyncio.create_task(t.run()) for t in (a, b)]
    await eventually(lambda: a.ok_after(0) >= 20 and b.ok_after(0) >= 20, 5, "warm-up")
    return a, b, tasks


async def finish(tasks: list[asyncio.Task[None]], *traffic: Traffic) -> None:
    for t in traffic:
        t.stop.set()
    await asyncio.gather(*tasks)


@pytest.mark.slow
async def test_coordinated_failover_loses_no_request(
    app_client: Client, store: Store, redis_cluster: ClusterProcesses, prefix: str
) -> None:
    key_a, key_b, primary = await keys_on_two_shards(store, redis_cluster, prefix)
    replica = redis_cluster.replica_of(primary)
    a, b, tasks = await drive(app_client, key_a, key_b)
    start = time.monotonic()
    replica.call("CLUSTER", "FAILOVER")
    await eventually(lambda: redis_cluster.role_of(replica) == "master", 10, "promotion")
    promoted = time.monotonic()
    await eventually(lambda: a.ok_after(promoted) >= 20, 5, "traffic on the new primary")
    await finish(tasks, a, b)
    print(
        f"\ncoordinated failover: promoted after {1000 * (promoted - start):.0f} ms; "
        f"{len(a.log)} + {len(b.log)} requests, "
        f"{len(a.failures()) + len(b.failures())} failed"
    )
    assert a.failures() == [] and b.failures() == []


@pytest.mark.slow
async def test_primary_killed_recovers_without_restart(
    app_client: Client, store: Store, redis_cluster: ClusterProcesses, prefix: str
) -> None:
    key_a, key_b, primary = await keys_on_two_shards(store, redis_cluster, prefix)
    replica = redis_cluster.replica_of(primary)
    a, b, tasks = await drive(app_client, key_a, key_b)
    assert primary.proc.proc is not None
    killed = time.monotonic()
    primary.proc.proc.kill()
    await eventually(lambda: redis_cluster.role_of(replica) == "master", 15, "promotion")
    promoted = time.monotonic()
    replica.call("SCRIPT", "FLUSH")  # the next admission there must reload the script
    await eventually(lambda: a.ok_after(promoted) >= 50, RECOVERY_BOUND_S, "recovery")
    await finish(tasks, a, b)

    failed = a.failures(since=killed)
    first_ok_after = next(
        at
        for at, status, _ in a.log
        if at > killed and status == 200 and not any(f[0] > at for f in failed)
    )
    outage = (failed[-1][0] - failed[0][0]) if failed else 0.0
    with replica.client() as c:
        stats = c.info("commandstats").get("cmdstat_script", {})
    print(
        f"\nprimary killed: promoted after {promoted - killed:.2f} s; shard of key A: "
        f"{len(failed)} of {len(a.log)} requests failed over {outage:.2f} s, served again "
        f"{first_ok_after - killed:.2f} s after the kill; other shard: "
        f"{len(b.failures())} of {len(b.log)} failed; new primary {stats}"
    )
    assert first_ok_after - killed < RECOVERY_BOUND_S
    assert all(status == 503 for _, status, _ in failed)  # fail closed, never a 500
    assert all(orjson.loads(body)["error"]["code"] == -32603 for _, _, body in failed)
    assert a.ok_after(first_ok_after) >= 20 and not a.failures(since=first_ok_after)
    assert b.failures() == []  # the other shard never noticed
    assert stats.get("calls", 0) >= 2  # SCRIPT FLUSH, then a SCRIPT LOAD on NOSCRIPT


@pytest.mark.slow
async def test_hung_primary_does_not_starve_the_other_shards(
    app_client: Client, store: Store, redis_cluster: ClusterProcesses, prefix: str
) -> None:
    key_a, key_b, primary = await keys_on_two_shards(store, redis_cluster, prefix)
    replica = redis_cluster.replica_of(primary)
    # 80 callers of the first key: more than the 64 connections a node gets,
    # so the hung node's calls fill its gate while they wait out the timeout.
    many = [Traffic(app_client, key_a, pace_s=0.05) for _ in range(80)]
    other = Traffic(app_client, key_b)
    tasks = [asyncio.create_task(t.run()) for t in (*many, other)]
    await eventually(lambda: other.ok_after(0) >= 20, 5, "warm-up")
    assert primary.proc.proc is not None
    hung = time.monotonic()
    primary.proc.proc.send_signal(signal.SIGSTOP)
    try:
        await eventually(lambda: redis_cluster.role_of(replica) == "master", 15, "promotion")
        promoted = time.monotonic()
        await eventually(
            lambda: sum(t.ok_after(promoted) for t in many) >= 200, RECOVERY_BOUND_S, "recovery"
        )
    finally:
        primary.proc.proc.send_signal(signal.SIGCONT)
    await finish(tasks, *many, other)
    failed = sorted(f for t in many for f in t.failures(since=hung))
    sent = sum(len(t.log) for t in many)
    during = sum(1 for at, *_ in other.log if hung < at < promoted)
    print(
        f"\nprimary hung: promoted after {promoted - hung:.2f} s; hung shard: "
        f"{len(failed)} of {sent} requests failed (all 503: "
        f"{all(s == 503 for _, s, _ in failed)}); other shard: {len(other.failures())} of "
        f"{len(other.log)} failed, {during} answered while the node hung"
    )
    assert all(status == 503 for _, status, _ in failed)
    assert other.failures() == [] and during >= 10
