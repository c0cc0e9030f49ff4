"""Redis clients with hot-path timeouts.

redis-py's defaults retry with backoff and wait seconds on a hung server;
on the request path a slow answer is as bad as none, so every client here
gets millisecond socket timeouts, no retries, and a blocking pool (the
default asyncio pool raises ``MaxConnectionsError`` past its size, which
under load became HTTP 500s).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry

from gateway.config import RedisConfig

RedisClient = Redis | RedisCluster


class GatedRedisCluster(RedisCluster):
    """A cluster client whose commands wait for a connection instead of failing.

    redis-py's cluster nodes raise ``MaxConnectionsError`` once
    ``max_connections`` commands are in flight to one node (there is no
    blocking pool for clusters). Here each node has a gate of ``per_node``
    places: a command for a busy node waits at most ``gate_timeout_s``, as
    ``BlockingConnectionPool`` does for one Redis. The gates are per node so
    that a hung node, whose calls each hold a place until they time out,
    cannot starve the healthy ones. Nodes are built with twice ``per_node``
    connections, room for calls that a MOVED/ASK sends on to another node.
    """

    def __init__(
        self, *args: Any, per_node: int = 64, gate_timeout_s: float = 0.25, **kwargs: Any
    ) -> None:
        kwargs["max_connections"] = 2 * per_node
        super().__init__(*args, **kwargs)
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._per_node = per_node
        self._gate_timeout_s = gate_timeout_s

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        gate = self._gates.get(target_node.name)
        if gate is None:
            gate = self._gates[target_node.name] = asyncio.Semaphore(self._per_node)
        try:
            async with asyncio.timeout(self._gate_timeout_s):
                await gate.acquire()
        except TimeoutError:
            raise RedisConnectionError(
                f"no free connection to {target_node.name} in time"
            ) from None
        try:
            return await super()._execute_command(target_node, *args, **kwargs)
        finally:
            gate.release()


def connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``), or a cluster."""
    timeout = cfg.timeout_ms / 1000
    connect_timeout = cfg.connect_timeout_ms / 1000
    if cfg.cluster:
        # reinitialize_steps=0: a MOVED (failover, resharding) re-points that
        # slot only; redis-py's default closes the whole client every 5th
        # MOVED, failing unrelated calls in flight on other connections.
        return GatedRedisCluster.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout,
            per_node=cfg.max_connections,
            retry=Retry(NoBackoff(), 1),
            require_full_coverage=False,
            reinitialize_steps=0,
            gate_timeout_s=timeout,
        )
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=cfg.max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
    )
    return Redis.from_pool(pool)


def admin_connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for the CLI and dashboard: same server, patient timeouts."""
    if cfg.cluster:
        return GatedRedisCluster.from_url(
            url,
            decode_responses=True,
            socket_timeout=5,
            socket_connect_timeout=5,
            require_full_coverage=False,
            reinitialize_steps=0,
            gate_timeout_s=5,
        )
    return Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5)


def pubsub_connect(url: str) -> Redis:
    """A plain client for SUBSCRIBE, even on a Cluster (PUBLISH reaches every node).

    No socket timeout: a subscriber waits for messages by design; redis-py's
    health checks (every 30 s) find a dead connection instead.
    """
    return Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=5, health_check_interval=30
    )
