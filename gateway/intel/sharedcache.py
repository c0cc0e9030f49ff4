"""The optional shared cache tier in Redis: final answers only, with TTLs and a byte cap.

Only answers that can never change (FOREVER, or final) go here: a shared
tier keyed by head would be rewritten every block for little gain. Every
entry has a TTL, and the tier's size is capped in bytes without scanning:
writes are counted per TTL-long window (Redis ``TIME``), and a write is
refused when it would take the bytes written in this window and the one
before above the cap. Every live entry was written within the last TTL,
i.e. in one of those two windows, so the live bytes never exceed the cap
(the eRPC failure this prevents: a Redis tier that grew to 12.9 GiB).

Keys are spread over ``SHARDS`` hash-tagged shards, each with its own
counter and 1/SHARDS of the cap, so a Redis Cluster spreads the tier over
its nodes and every script touches one slot. A Redis error is a miss (or a
skipped store), never a failed call: the tier is an optimisation.

Nothing is kept in the process: a value read back is handed to the local
``ResponseCache``, whose ``put`` stores an exact-size copy and counts it.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Final

from redis.exceptions import RedisError

log = logging.getLogger("gateway.intel.cache")

SHARDS: Final = 16
KEY_OVERHEAD: Final = 64  # Redis's own bytes per key (dict entry, object headers)

# KEYS[1] the value's key  KEYS[2] the shard's byte counters (hash: window -> bytes)
# ARGV[1] value  ARGV[2] ttl ms  ARGV[3] the shard's cap in bytes  ARGV[4] bytes charged
# returns 1 stored, 0 refused (the shard's window budget is spent)
STORE_LUA: Final = """
local t = redis.call('TIME')
local ttl = tonumber(ARGV[2])
local window = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / ttl)
local used = tonumber(redis.call('HGET', KEYS[2], window) or '0')
    + tonumber(redis.call('HGET', KEYS[2], window - 1) or '0')
local size = tonumber(ARGV[4])
if used + size > tonumber(ARGV[3]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('HINCRBY', KEYS[2], window, size)
redis.call('HDEL', KEYS[2], window - 2)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
return 1
"""


class SharedCache:
    """One network's shard of the Redis tier; ``get``/``put`` by the cache's call key."""

    def __init__(
        self,
        redis: Any,
        *,
        prefix: str,
        network: str,
        ttl_s: float,
        max_bytes: int,
        max_entry_bytes: int,
    ) -> None:
        self._redis = redis
        self._base = f"{prefix}:cache:{network}"
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._shard_cap = max(1, max_bytes // SHARDS)
        self.max_entry_bytes = min(max_entry_bytes, self._shard_cap)
        self._store = redis.register_script(STORE_LUA)
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self.refused = 0  # over the byte cap
        self.errors = 0

    def _keys(self, key: bytes) -> tuple[str, str]:
        digest = hashlib.blake2b(key, digest_size=16).digest()
        tag = f"{{{self._base}:{digest[0] % SHARDS}}}"
        return f"{tag}:{digest.hex()}", f"{tag}:bytes"

    async def get(self, key: bytes) -> bytes | None:
        name, _ = self._keys(key)
        try:
            value = await self._redis.get(name)
        except (RedisError, OSError, TimeoutError) as exc:
            self.errors += 1
            log.debug("shared cache get failed error=%s", exc.__class__.__name__)
            return None
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        return value if isinstance(value, bytes) else str(value).encode()

    async def put(self, key: bytes, result: bytes) -> bool:
        name, counters = self._keys(key)
        size = len(name) + len(result) + KEY_OVERHEAD
        if size > self.max_entry_bytes:
            return False
        try:
            stored = await self._store(
                keys=[name, counters], args=[result, self._ttl_ms, self._shard_cap, size]
            )
        except (RedisError, OSError, TimeoutError) as exc:
            self.errors += 1
            log.debug("shared cache put failed error=%s", exc.__class__.__name__)
            return False
        if int(stored) == 1:
            self.stored += 1
            return True
        self.refused += 1
        return False
