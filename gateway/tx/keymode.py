"""A key's own private-transaction choice, cached in this process.

The owner's choice lives in the key record hash as field ``ptx`` (``on``,
``fallback``, ``off``; absent = none), written by
``gateway.store.keytx`` (dashboard and CLI). Raw transactions are the only
calls that need it, so it is read on the first transaction of a key and
kept for ``ttl_s``; every change is PUBLISHed on the key channel, which
drops the cached copy in every process at once (the TTL is the safety net
when that message is lost).

The route a key's transactions take is the stricter of its plan's
``private_tx`` and the owner's choice (on > fallback > off): a plan that
promises privacy keeps it, and an owner may ask for more.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import orjson

from gateway.redis.keyspace import record_key

_RANK: Final = {"off": 0, "fallback": 1, "on": 2}


def stricter(plan_mode: str, key_mode: str) -> str:
    """The route of a key: the stricter of its plan's mode and its own."""
    return key_mode if _RANK.get(key_mode, 0) > _RANK.get(plan_mode, 0) else plan_mode


_NONE: Mapping[str, Any] = {}


class KeyModes:
    """khash -> the owner's ``ptx`` choice ("" = none) and bundle options (field ``bopt``,
    JSON: ``noMerge``, ``positionFirst``, ``mev_builders``), cached with a TTL and
    invalidated."""

    def __init__(
        self, redis: Any, prefix: str, ttl_s: float = 5.0, max_keys: int = 100_000
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._max = max_keys
        self._cache: dict[str, tuple[str, Mapping[str, Any], float]] = {}

    async def mode(self, khash: str) -> str:
        return (await self.settings(khash))[0]

    async def settings(self, khash: str) -> tuple[str, Mapping[str, Any]]:
        """The key's route choice and its bundle options (one Redis read per TTL)."""
        hit = self._cache.get(khash)
        now = time.monotonic()
        if hit is not None and hit[2] > now:
            return hit[0], hit[1]
        ptx, bopt = await self._redis.hmget(record_key(self._prefix, khash), ["ptx", "bopt"])
        value = ptx.decode() if isinstance(ptx, bytes) else (ptx or "")
        options = _options(bopt)
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[khash] = (value, options, now + self._ttl_s)
        return value, options

    def invalidate(self, khash: str | None) -> None:
        """A key record changed (None: any may have): forget it (a ``KeyEvents`` listener)."""
        if khash is None:
            self._cache.clear()
        else:
            self._cache.pop(khash, None)


def _options(raw: Any) -> Mapping[str, Any]:
    """The stored bundle options; anything unreadable is none (they are a preference)."""
    if not raw:
        return _NONE
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _NONE
    return value if isinstance(value, dict) else _NONE
