"""Switching plans keeps the token bucket's level.

Through the real admission script on a real Redis, with the shipped default
plans (free: 25/s, burst 50; payg: 300/s, burst 600). Before the fix
``set_plan`` deleted the bucket, so free -> payg -> free handed out a fresh
full bucket on every switch.
"""

from __future__ import annotations

import time

from gateway.config import config_from_dict
from gateway.limits.limiter import Limiter, Status
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.limiters import MakeLimiter

T0 = 1_700_000_000_000  # an injected "now" in ms
PLANS = config_from_dict({}).plans


async def burst(limiter: Limiter, key: str, n: int, now: int | None) -> int:
    """How many of ``n`` back-to-back calls are admitted."""
    passed = 0
    for _ in range(n):
        d = await limiter.admit(key_hash(key), 1, {"eth_call": 1}, now_ms=now)
        passed += d.status is Status.ADMITTED
    return passed


async def test_defaults_are_the_spec_plans() -> None:
    assert [(p.name, p.rate, p.burst) for p in PLANS] == [("free", 25, 50), ("payg", 300, 600)]


async def test_free_payg_free_is_not_a_fresh_bucket(
    make_limiter: MakeLimiter, store: Store, account: str, api_key: str
) -> None:
    under = make_limiter(PLANS)
    limiter = under.limiter
    assert await burst(limiter, api_key, 60, T0) == 50
    await store.set_plan(account, "payg")
    under.changed(api_key)
    assert await burst(limiter, api_key, 700, T0) == 0  # not a fresh 600
    await store.set_plan(account, "free")
    under.changed(api_key)
    assert await burst(limiter, api_key, 60, T0) == 0  # not a fresh 50
    # it refills at the plan's rate from the level it had: 25/s for 1 s
    assert await burst(limiter, api_key, 60, T0 + 1000) == 25


async def test_downgrade_clamps_the_level_to_the_new_burst(
    make_limiter: MakeLimiter, store: Store
) -> None:
    under = make_limiter(PLANS)
    limiter = under.limiter
    acct = await store.create_account("payg-user@example.com", "a long password", "payg")
    key, _ = await store.create_key(acct.id)
    assert await burst(limiter, key, 100, T0) == 100  # 500 left of 600
    await store.set_plan(acct.id, "free")
    under.changed(key)
    d = await limiter.admit(key_hash(key), 1, {"eth_call": 1}, now_ms=T0)
    assert d.status is Status.ADMITTED and d.limit == 50 and d.remaining == 49
    assert await burst(limiter, key, 100, T0) == 49
    await store.set_plan(acct.id, "payg")  # back up: the level stays, no refill
    under.changed(key)
    assert await burst(limiter, key, 100, T0) == 0


async def test_switching_back_and_forth_on_redis_time(
    make_limiter: MakeLimiter, store: Store, account: str, api_key: str
) -> None:
    """The issue's attack on the real clock: 151 passed back to back before."""
    under = make_limiter(PLANS)
    limiter = under.limiter
    started = time.monotonic()
    passed = await burst(limiter, api_key, 60, None)
    for plan in ("payg", "free", "payg", "free"):
        await store.set_plan(account, plan)
        under.changed(api_key)
        passed += await burst(limiter, api_key, 60, None)
    elapsed = time.monotonic() - started
    # one bucket of 50 plus what refilled meanwhile (at most payg's 300/s)
    assert 50 <= passed <= 50 + 300 * elapsed + 1, (passed, elapsed)  # was 1,350
