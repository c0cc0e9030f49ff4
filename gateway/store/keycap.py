"""The per-account cap on working keys, counted from an index, not from every record.

Each account has a sorted set of its working keys (``ks.account_working``):
member the key id, score the millisecond it stops working (``+inf`` for a
key without an end). Creating a key adds it, revoking removes it, rotating
rescores the old key to the end of its grace period. Counting is then two
commands however many keys the account holds: drop the members whose time
has passed, count the rest. An account whose index is missing (keys made
before it existed, or none working) has it rebuilt once from its records.
"""

from __future__ import annotations

from typing import Any

from gateway.redis import keyspace as ks
from gateway.store.records import KeyRecord, counts_towards_cap

NO_END = "+inf"


def stops(expires_at_ms: int | None) -> float | str:
    """A key's score: when it stops working, or ``+inf``."""
    return NO_END if expires_at_ms is None else expires_at_ms


def add_working(pipe: Any, prefix: str, account_id: str, key_id: str, stops_ms: int | None) -> None:
    """Queue: ``key_id`` works until ``stops_ms`` (None: no end)."""
    pipe.zadd(ks.account_working(prefix, account_id), {key_id: stops(stops_ms)})


def drop_working(pipe: Any, prefix: str, account_id: str, key_id: str) -> None:
    """Queue: ``key_id`` no longer works (revoked)."""
    pipe.zrem(ks.account_working(prefix, account_id), key_id)


async def working_count(redis: Any, prefix: str, account_id: str, now_ms: int, records: Any) -> int:
    """Keys of the account that work at ``now_ms``; ``records`` (an awaitable
    factory of the account's ``KeyRecord`` list) is called only to rebuild a
    missing index."""
    index = ks.account_working(prefix, account_id)
    if not await redis.exists(index):
        listed: list[KeyRecord] = await records()
        working = {r.id: stops(r.expires_at) for r in listed if counts_towards_cap(r, now_ms)}
        if not working:
            return 0
        await redis.zadd(index, working)
    pipe = redis.pipeline(transaction=False)
    pipe.zremrangebyscore(index, "-inf", now_ms)  # expired: status() says so at now >= exp
    pipe.zcard(index)
    return int((await pipe.execute())[1])
