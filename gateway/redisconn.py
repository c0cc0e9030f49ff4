"""Redis clients with hot-path timeouts.

redis-py's defaults retry with backoff and wait seconds on a hung server;
on the request path a slow answer is as bad as none, so every client here
gets millisecond socket timeouts, no retries, and a blocking pool (the
default asyncio pool raises ``MaxConnectionsError`` past its size, which
under load became HTTP 500s).
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.config import RedisConfig

RedisClient = Redis | RedisCluster


def connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``), or a cluster."""
    timeout = cfg.timeout_ms / 1000
    connect_timeout = cfg.connect_timeout_ms / 1000
    if cfg.cluster:
        return RedisCluster.from_url(
            url, decode_responses=True, socket_timeout=timeout,
            socket_connect_timeout=connect_timeout, max_connections=cfg.max_connections,
            retry=Retry(NoBackoff(), 1), require_full_coverage=False)
    pool = BlockingConnectionPool.from_url(
        url, max_connections=cfg.max_connections, timeout=timeout,
        socket_timeout=timeout, socket_connect_timeout=connect_timeout,
        decode_responses=True, retry=Retry(NoBackoff(), 0), health_check_interval=0)
    return Redis.from_pool(pool)


def admin_connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for the CLI and dashboard: same server, patient timeouts."""
    if cfg.cluster:
        return RedisCluster.from_url(url, decode_responses=True, socket_timeout=5,
                                     socket_connect_timeout=5, require_full_coverage=False)
    return Redis.from_url(url, decode_responses=True, socket_timeout=5,
                          socket_connect_timeout=5)
