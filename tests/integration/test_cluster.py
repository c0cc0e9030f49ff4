"""The gateway on a real Redis Cluster: three primaries from the bundled redis-server.

tests/helpers/cluster_fixtures.py re-points the shared fixtures (``redis_url``,
``redis``, ``make_config``, ``limiter``, ``cli``) at the cluster; the
core auth, limit, revoke, usage and CLI tests are then imported from their
modules and run here again, unchanged, through the real app. The tests
written for this module check what only a cluster can break: every Redis
key of one API key in one slot, the script cache on every node, a revoke
reaching several gateway processes, and many requests in flight at once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import Config
from gateway.redis.clients import GatedRedisCluster, connect
from gateway.redis.embedded import free_port
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers import cluster_fixtures as _cf
from tests.helpers.cluster import RedisCluster as ClusterProcesses
from tests.helpers.config import Client, MakeConfig
from tests.helpers.lease import settle, until_status
from tests.helpers.writerace import closed_under_the_write

# The core tests, run again here against the cluster (pytest collects them
# from this module's namespace, with this module's fixtures).
from tests.integration.test_cli import (  # noqa: F401
    test_account_key_lifecycle,
    test_cli_key_works_on_a_live_gateway,
)
from tests.integration.test_limiter import (  # noqa: F401
    test_allowlists_are_anded_entries_ored,
    test_bucket_admits_burst_then_refills_at_rate,
    test_daily_quota,
    test_key_record_holds_only_the_hash,
    test_limited_answer_says_when_to_retry,
    test_noscript_after_script_flush_is_reloaded,
    test_plan_switch_applies_on_next_request,
    test_revoked_and_expired_keys,
    test_unknown_key_is_unauthorized,
    test_usage_counters,
    test_weights_and_batch_cost_are_charged_as_a_whole,
    under_test,
)
from tests.integration.test_rpc import (  # noqa: F401
    test_auth_failure_in_batch_is_one_error_per_call,
    test_bad_keys_are_401,
    test_batch_is_admitted_call_by_call,
    test_both_key_forms_on_both_networks,
    test_path_and_header_keys_must_match,
    test_rate_limit_429_with_retry_after_and_headers,
    test_revoked_and_expired_keys_are_401,
    tight,
)
from tests.integration.test_store import (  # noqa: F401
    test_accounts_and_passwords,
    test_error_counts_flush_into_usage,
    test_key_lifecycle,
    test_other_accounts_cannot_touch_a_key,
    test_rotate_keeps_settings_and_gives_grace,
)

# The shared fixtures, re-pointed at the cluster of this module.
redis_url, redis, make_config, limiter, cli_redis_toml = (
    _cf.redis_url,
    _cf.redis,
    _cf.make_config,
    _cf.limiter,
    _cf.cli_redis_toml,
)

CALL = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    """Three primaries, no replicas (test_failover.py has its own, with replicas)."""
    cluster = ClusterProcesses(tmp_path_factory.mktemp("cluster"), primaries=3).start()
    yield cluster
    cluster.stop()


# -- what only a cluster can break ------------------------------------------------
async def test_the_app_really_runs_on_the_cluster(client: Client, config: Config) -> None:
    assert config.redis.cluster
    resp = await client.get("/readyz")
    assert resp.status == 200, await resp.text()
    assert isinstance(client.app[T.REDIS], RedisCluster)


async def test_every_key_of_one_api_key_lives_in_one_slot(
    client: Client, store: Store, account: str, redis: RedisCluster, prefix: str
) -> None:
    keys = []
    for _ in range(10):  # several API keys: all on one primary has odds of 3 in 59049
        key, rec = await store.create_key(account)
        keys.append((key, rec.id))
        for _ in range(3):
            resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
            assert resp.status == 200
        await store.add_errors({key_hash(key): 1})
        await settle(client.app)
        assert (await store.usage(rec.id)).total == 3
    nodes_used = set()
    for key, _ in keys:
        tag = "{" + key_hash(key) + "}"
        found = [k async for k in redis.scan_iter(match=f"{prefix}:{tag}:*")]
        assert record_key(prefix, key_hash(key)) in found, found
        assert len(found) >= 3, found  # record (and bucket), hour of minutes, day totals
        slots = {redis.keyslot(k) for k in found}
        assert len(slots) == 1
        nodes_used.add(redis.nodes_manager.get_node_from_slot(slots.pop()).name)
    assert len(nodes_used) >= 2


async def test_script_cache_is_reloaded_on_every_node(
    client: Client, store: Store, account: str, redis: RedisCluster
) -> None:
    keys = [(await store.create_key(account))[0] for _ in range(6)]
    for key in keys:
        assert (await client.post(f"/bsc/{key}", data=CALL, headers=JSON)).status == 200
    await redis.execute_command("SCRIPT FLUSH", target_nodes=RedisCluster.ALL_NODES)
    for key in keys:  # each primary answers NOSCRIPT once; redis-py loads and retries
        assert (await client.post(f"/bsc/{key}", data=CALL, headers=JSON)).status == 200


async def test_many_requests_in_flight_at_once(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], store: Store, account: str
) -> None:
    # 300 requests, 16 connections: the rest wait for one (a patient timeout
    # here, so that a slow machine cannot turn waiting into 503s).
    cfg = make_config(
        {
            "plans": {"free": {"rate": 0.001, "burst": 100}},
            "redis": {"max_connections": 16, "timeout_ms": 5000},
        }
    )
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    key, _ = await store.create_key(account)

    async def one() -> int:
        resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
        await resp.read()
        return resp.status

    statuses = Counter(await asyncio.gather(*(one() for _ in range(300))))
    assert statuses[200] == 100 and statuses[429] == 200, statuses


async def test_redirected_calls_and_pipelines_wait_at_the_node_that_serves_them(
    redis_url: str, prefix: str
) -> None:
    """A node's gate bounds every connection taken from it, not only first-aimed calls.

    redis-py follows a MOVED inside one call, and pipelines go to the nodes
    directly: both took connections past a gate set where a command was first
    aimed, so a cold start or a failover (many calls redirected at once) ran
    a node out of its pool (``MaxConnectionsError``). Here two slots served
    by one node are pointed at the other two nodes (as a stale slot map
    would), and calls to all three slots and pipelines run at once.
    """
    client = GatedRedisCluster.from_url(
        redis_url, decode_responses=True, per_node=2, gate_timeout_s=10, reinitialize_steps=0
    )
    try:
        await client.initialize()
        manager = client.nodes_manager
        by_node: dict[str, list[str]] = {}
        for i in range(2000):
            tag = f"{prefix}:{{g{i}}}"
            by_node.setdefault(manager.get_node_from_slot(client.keyslot(tag)).name, []).append(tag)
        name, tags = max(by_node.items(), key=lambda item: len(item[1]))
        served = manager.nodes_cache[name]
        others = [node for node in manager.nodes_cache.values() if node is not served]
        direct, moved_a, moved_b = tags[:3]
        manager.slots_cache[client.keyslot(moved_a)] = [others[0]]
        manager.slots_cache[client.keyslot(moved_b)] = [others[1]]

        async def piped(i: int) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            pipe.incr(f"{direct}:p{i}")
            pipe.incr(f"{direct}:p{i}")
            return await pipe.execute()

        calls = [
            client.incr(f"{tag}:c{i}") for tag in (direct, moved_a, moved_b) for i in range(10)
        ]
        results = await asyncio.gather(*calls, *(piped(i) for i in range(10)))
        assert results == [1] * 30 + [[1, 2]] * 10
        # the gate's places, no more (the pool could hold 2 * per_node)
        assert len(served._connections) <= 2, len(served._connections)
    finally:
        await client.aclose()


async def test_a_write_closed_under_it_on_a_cluster_node_is_a_connection_error(
    config: Config, redis_url: str
) -> None:
    """The race that answered 500 in the hung-primary failover: a node's connection is
    disconnected (as redis-py does to a failed node's connections) while a call's write
    is scheduled on it. It must be redis-py's ConnectionError, which every Redis
    failure path answers with 503 (tests/integration/test_redis_write_race.py)."""
    client = connect(config.redis, redis_url)
    assert isinstance(client, GatedRedisCluster)
    try:
        await client.initialize()
        node: Any = next(iter(client.nodes_manager.nodes_cache.values()))
        conn = node.acquire_connection()
        try:
            raised = await closed_under_the_write(conn)
        finally:
            node.release(conn)
        assert isinstance(raised, RedisConnectionError), repr(raised)
        assert await client.ping()
    finally:
        await client.aclose()


async def test_revoke_reaches_every_gateway_process_within_a_second(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], store: Store, redis_url: str
) -> None:
    """Three apps, each with its own cluster client, as three processes would have."""
    acct = await store.create_account(
        f"c-{secrets.token_hex(3)}@example.com", "a long password", "payg"
    )
    key, rec = await store.create_key(acct.id)
    clients: list[Client] = [
        await aiohttp_client(TestServer(create_app(make_config()))) for _ in range(3)
    ]
    for c in clients:
        assert (await c.post(f"/bsc/{key}", data=CALL, headers=JSON)).status == 200
    revoker = connect(make_config().redis, redis_url)
    try:
        start = time.monotonic()
        await Store(revoker, prefix=store.prefix).revoke_key(rec.id)
        done = time.monotonic()
    finally:
        await revoker.aclose()

    async def first_401(c: Client) -> float:
        async def status() -> int:
            return (await c.post(f"/bsc/{key}", data=CALL, headers=JSON)).status

        await until_status(status, 401)  # pub/sub reaches every process
        return time.monotonic() - start

    latencies = await asyncio.gather(*(first_401(c) for c in clients))
    print(
        f"\ncluster revoke: store call {1000 * (done - start):.1f} ms, first 401 per "
        "gateway " + ", ".join(f"{1000 * v:.1f} ms" for v in latencies)
    )
    assert max(latencies) < 1.0


async def test_one_limit_across_several_gateways(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], store: Store, account: str
) -> None:
    cfg = make_config({"plans": {"free": {"rate": 0.001, "burst": 30}}})
    clients: list[Client] = [await aiohttp_client(TestServer(create_app(cfg))) for _ in range(3)]
    key, _ = await store.create_key(account)

    async def one(i: int) -> int:
        resp = await clients[i % 3].post(f"/bsc/{key}", data=CALL, headers=JSON)
        await resp.read()
        return resp.status

    statuses = Counter(await asyncio.gather(*(one(i) for i in range(90))))
    assert statuses == Counter({200: 30, 429: 60})


async def test_unreachable_cluster_fails_closed_not_500(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any]
) -> None:
    """No node answers (all down, or a wrong URL): 503 and not ready, never a 500."""
    cfg = make_config({"redis": {"url": f"redis://127.0.0.1:{free_port()}/0"}})
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    key = "A" * 32
    resp = await client.post(f"/bsc/{key}", data=CALL, headers=JSON)
    assert resp.status == 503, await resp.text()
    body = await resp.json()
    assert body["error"] == {"code": -32603, "message": "Service unavailable"}
    assert (await client.get("/readyz")).status == 503
