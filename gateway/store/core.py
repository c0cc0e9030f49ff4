"""What every part of the Store shares: the Redis client and settings, Redis time, errors.

The Store is one facade (gateway/store/accounts.py) composed of one mixin per
concept (accounts, apikeys, sessions, attempts, usage, passwords); each mixin
extends ``StoreCore`` and names its Redis keys through gateway.redis.keyspace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from argon2 import PasswordHasher
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

RedisClient = Redis | RedisCluster

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


class StoreError(Exception):
    """A store operation cannot be done; the message says why, for users."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Busy(StoreError):
    """Every password-hashing thread stayed busy for too long: try again soon."""


class StoreCore:
    """State shared by the Store's mixins; holds no behaviour of its own but Redis time."""

    def __init__(
        self,
        redis: RedisClient,
        *,
        prefix: str = "gw",
        plans: Sequence[str] = ("free", "payg"),
        default_plan: str = "free",
        hasher: PasswordHasher | None = None,
        max_keys: int | None = None,
        key_retention_ms: int = 30 * DAY_MS,
        max_inactive_keys: int = 20,
        hash_threads: int = 2,
        hash_wait_s: float = 5.0,
    ) -> None:
        # redis-py's annotations do not model decode_responses=True (every
        # reply here is str), so the client is typed loosely on purpose.
        self.redis: Any = redis
        self.prefix = prefix
        self.plans = tuple(plans)
        self.default_plan = default_plan
        self.max_keys = max_keys  # None: no cap (tests, scripts)
        self.key_retention_ms = max(0, key_retention_ms)
        self.max_inactive_keys = max(0, max_inactive_keys)
        self._hasher = hasher or PasswordHasher()
        # argon2 takes ~100 ms of CPU and 64 MiB: it runs in threads of its
        # own, at most ``hash_threads`` at once and at a lower CPU priority,
        # so log-ins never stall the event loop and a log-in flood cannot
        # take every core from RPC traffic.
        self._hash_threads = max(1, hash_threads)
        self._hash_slots = asyncio.Semaphore(self._hash_threads)
        self._hash_wait_s = hash_wait_s
        self._hash_pool: ThreadPoolExecutor | None = None
        self._dummy_hash: str | None = None
        self._hit_script: AsyncScript | None = None  # dashboard support
        self._attempt_script: AsyncScript | None = None
        self._success_script: AsyncScript | None = None

    async def now_ms(self) -> int:
        sec, usec = await self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _check_plan(self, plan: str) -> None:
        if plan not in self.plans:
            raise StoreError(f"unknown plan {plan!r}; plans: {', '.join(self.plans)}")
