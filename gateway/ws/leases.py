"""Per-key socket caps across every gateway process: one lease per open socket in Redis.

A key's open sockets are a sorted set ``<prefix>:{H}:ws`` (same hash tag as
the key record, so one Cluster slot): member = a random socket token,
score = the lease's end (Redis time, ms). Opening a socket is one script
call (drop lapsed leases, count, add if under the cap); closing removes the
token; each process renews the leases of its open sockets every
``ws.socket_lease_s / 3``. A process that dies
without closing its sockets stops renewing, and its leases lapse within
``ws.socket_lease_s``: a crash never locks a key out for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterable
from typing import Any

from redis.exceptions import RedisError

from gateway.redis import keyspace

log = logging.getLogger("gateway.ws")

_CONCURRENT = 32  # renewals in flight at once (the client's pool is not unbounded)

# KEYS[1] the key's socket set   ARGV[1] socket token   ARGV[2] cap   ARGV[3] lease ms
# returns 1 (leased) or 0 (the key already holds ``cap`` live sockets)
LEASE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

# KEYS[1] the key's socket set   ARGV[1] lease ms   ARGV[2...] tokens to renew
RENEW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"""


class LeaseUnavailable(Exception):
    """Redis could not be asked; the caller applies the fail-open/closed policy."""


sockets_key = keyspace.ws_sockets


def new_token() -> str:
    return secrets.token_hex(8)


class SocketLeases:
    """The Python face of the two scripts above."""

    def __init__(self, redis: Any, prefix: str, lease_s: float) -> None:
        self._redis = redis
        self._prefix = prefix
        self._lease_ms = str(int(lease_s * 1000))
        self._lease = redis.register_script(LEASE_LUA)
        self._renew = redis.register_script(RENEW_LUA)

    async def acquire(self, khash: str, token: str, cap: int) -> bool:
        """Lease one socket for ``khash``; False when the key is at ``cap``."""
        try:
            res = await self._lease(
                keys=[sockets_key(self._prefix, khash)], args=[token, str(cap), self._lease_ms]
            )
        except (RedisError, OSError) as exc:
            raise LeaseUnavailable(str(exc)) from exc
        return int(res) == 1

    async def release(self, khash: str, token: str) -> None:
        with contextlib.suppress(RedisError, OSError):  # else the lease lapses on its own
            await self._redis.zrem(sockets_key(self._prefix, khash), token)

    async def renew(self, held: Iterable[tuple[str, list[str]]]) -> None:
        """Renew every (key hash, tokens) this process holds (one script call per key,
        a few dozen at once: works the same on one Redis and on a Cluster)."""
        batch = [(khash, tokens) for khash, tokens in held if tokens]
        for i in range(0, len(batch), _CONCURRENT):
            try:
                await asyncio.gather(
                    *(
                        self._renew(
                            keys=[sockets_key(self._prefix, khash)], args=[self._lease_ms, *tokens]
                        )
                        for khash, tokens in batch[i : i + _CONCURRENT]
                    )
                )
            except (RedisError, OSError) as exc:
                log.warning("ws lease renewal failed err=%s", type(exc).__name__)
