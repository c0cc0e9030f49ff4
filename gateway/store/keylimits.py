"""Per-key caps set by the key's owner: a request rate and a daily compute-unit cap.

They live in the key record hash ``p:{H}:k`` (redis/keyspace.py) as two fields
the admission script reads in the same atomic call as the plan's limits:

    rcap   requests per second, a positive number <= the plan's rate
    dcap   compute units per UTC day, a positive integer

Absent or ``""`` means "the plan's". A cap can only make a key stricter
than its plan, never looser, so a leaked key's blast radius is bounded by
what its owner chose. Every change is PUBLISHed on ``p:keys`` with the key
hash, the channel gateway processes listen on to drop a cached record.
"""

from __future__ import annotations

import math

from gateway.config import PlanConfig
from gateway.redis.keyspace import record_key
from gateway.store.accounts import KeyRecord, StoreError
from gateway.store.keyevents import publish_key_change
from gateway.store.planview import PlanView

MAX_DAILY_CU = 10**15  # beyond any real day; keeps the field an exact Lua number


def parse_rate(text: str) -> float | None:
    """A form or CLI value for the rate cap: ``""`` = the plan's, else a positive number."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise StoreError(f"{text!r} is not a number of requests per second") from None
    return value


def parse_daily(text: str) -> int | None:
    """A form or CLI value for the daily cap: ``""`` = the plan's, else a whole number."""
    text = text.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise StoreError(f"{text!r} is not a whole number of compute units")
    return int(text)


class KeyLimits(PlanView):
    """Reads and writes the owner's caps of a key, checked against the plans in config."""

    def plan_of(self, record: KeyRecord) -> PlanConfig:
        plan = self._plans.get(record.plan)
        if plan is None:
            raise StoreError(f"key {record.id} is on plan {record.plan!r}, which is not configured")
        return plan

    async def set_key_limits(
        self,
        account_id: str | None,
        key_id: str,
        *,
        rate: float | None,
        daily_cu: int | None,
    ) -> KeyRecord:
        """Set (or with None clear) both caps of a key; returns the updated record.

        ``account_id`` None is the operator (CLI); otherwise the key must be
        that account's (NotFound if not). Both fields are written in one
        HSET, so the admission script never sees half a change.
        """
        record = await self.store.get_key(key_id, account_id)
        if record.revoked_at is not None:
            raise StoreError(f"key {key_id} is revoked; its limits can no longer change")
        plan = self.plan_of(record)
        if rate is not None:
            if not math.isfinite(rate) or rate <= 0:
                raise StoreError("the requests-per-second cap must be a positive number")
            if rate > plan.rate:
                raise StoreError(
                    f"the requests-per-second cap must be at most the {plan.title} plan's "
                    f"{fmt_rate(plan.rate)}; leave it empty to use the plan's rate"
                )
        if daily_cu is not None:
            if daily_cu < 1:
                raise StoreError("the daily compute-unit cap must be at least 1")
            if daily_cu > MAX_DAILY_CU:
                raise StoreError(f"the daily compute-unit cap must be at most {MAX_DAILY_CU:,}")
        khash = await self.store.key_hash_of(key_id)
        fields = {
            "rcap": "" if rate is None else fmt_rate(rate),
            "dcap": "" if daily_cu is None else str(daily_cu),
        }
        await self.redis.hset(record_key(self.prefix, khash), mapping=fields)
        await publish_key_change(self.redis, self.prefix, khash)
        return await self.store.get_key(key_id, account_id)


def fmt_rate(value: float) -> str:
    """A rate as admit.lua reads it and the form shows it: ``25``, ``0.5``, ``2.25``."""
    return str(int(value)) if value == int(value) else repr(value)
