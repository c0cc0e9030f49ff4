"""The admin API's audit log: every write (who, what, when, target), kept in Redis.

One list (``keyspace.audit_log``), newest first, trimmed to
``admin.audit_cap`` entries in the same transaction as each push. An entry
is JSON: ``{"at": ms, "who": token name, "action": "cordon", "target":
"bsc/bsc-0", "status": 200, "detail": {...}}``. ``who`` is the admin token's
name from the config, never the token; a detail never holds a secret (a
new key's value is not logged). Read by ``GET /admin/audit`` and ``gateway
audit``. ``append_sync`` is for the ``serve --workers`` supervisor, which
has no event loop of its own.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.redis import keyspace as ks

MAX_LIST = 1000  # entries one read returns at most


def entry(
    who: str, action: str, target: str, status: int, detail: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One audit entry, stamped now (ms, wall clock)."""
    return {
        "at": int(time.time() * 1000),
        "who": who,
        "action": action,
        "target": target,
        "status": status,
        "detail": detail or {},
    }


class AuditLog:
    """Append to and read the audit log over one redis-py asyncio client."""

    def __init__(self, redis: Any, prefix: str, cap: int) -> None:
        self.redis = redis
        self.key = ks.audit_log(prefix)
        self.cap = max(1, cap)

    async def append(self, item: dict[str, Any]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:  # one key: no slot issue
            pipe.lpush(self.key, orjson.dumps(item))
            pipe.ltrim(self.key, 0, self.cap - 1)
            await pipe.execute()

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries (at most ``MAX_LIST``), newest first."""
        limit = max(1, min(limit, MAX_LIST))
        rows = await self.redis.lrange(self.key, 0, limit - 1)
        out: list[dict[str, Any]] = []
        for row in rows:
            try:
                out.append(orjson.loads(row))
            except orjson.JSONDecodeError:
                continue  # never written by us; skipped, not fatal
        return out


def append_sync(url: str, cluster: bool, prefix: str, cap: int, item: dict[str, Any]) -> None:
    """``AuditLog.append`` with a short-lived synchronous client (the supervisor's way)."""
    import redis
    from redis.cluster import RedisCluster

    key = ks.audit_log(prefix)
    client: Any = (
        RedisCluster.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        if cluster
        else redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    )
    try:
        pipe = client.pipeline(transaction=False)
        pipe.lpush(key, orjson.dumps(item))
        pipe.ltrim(key, 0, max(1, cap) - 1)
        pipe.execute()
    finally:
        client.close()
