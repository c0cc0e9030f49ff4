"""Every admission implementation behind one fixture, so one test checks them all.

``exact`` runs admit.lua per request through redis-py, ``exact-mux`` the same
over the multiplexed connection, ``lease`` the default leased admission
(lease.lua + per-process cache and usage sums). What a test needs to say in
production terms has a method here: ``changed`` stands for the pub/sub
message a record change sends (tested end to end in test_lease_app.py),
``flush`` for the once-a-second usage write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.config import PlanConfig
from gateway.limits.leasing import LeaseLimiter
from gateway.limits.limiter import (
    ADMIT_LUA,
    LEASE_LUA,
    ExactLimiter,
    Limiter,
    MuxScript,
    RedisScript,
)
from gateway.redis.mux import MuxRedis
from gateway.rpc.auth import key_hash
from gateway.store.usagesink import UsageSink

KINDS = ["exact", "exact-mux", "lease"]


@dataclass
class UnderTest:
    limiter: Limiter
    sink: UsageSink

    def changed(self, key: str) -> None:
        """The key's record changed (revoke, plan, limits): what pub/sub tells each process."""
        if isinstance(self.limiter, LeaseLimiter):
            self.limiter.invalidate(key_hash(key))

    async def flush(self) -> None:
        """Write usage summed in this process (the lease limiter's once-a-second flush)."""
        await self.sink.flush()


MakeLimiter = Callable[[Sequence[PlanConfig]], UnderTest]


@pytest.fixture(params=KINDS)
async def make_limiter(
    request: pytest.FixtureRequest, redis: Redis | RedisCluster, prefix: str, redis_url: str
) -> AsyncIterator[MakeLimiter]:
    kind: str = request.param
    muxes: list[MuxRedis] = []

    def make(plans: Sequence[PlanConfig]) -> UnderTest:
        sink = UsageSink(redis, prefix)
        if kind == "exact":
            return UnderTest(ExactLimiter(RedisScript(redis, ADMIT_LUA), plans, prefix), sink)
        if kind == "exact-mux":
            if isinstance(redis, RedisCluster):
                pytest.skip("the multiplexed connection speaks to one server only")
            mux = MuxRedis(redis_url, timeout_s=2.0)
            muxes.append(mux)
            return UnderTest(ExactLimiter(MuxScript(mux, ADMIT_LUA), plans, prefix), sink)
        return UnderTest(LeaseLimiter(RedisScript(redis, LEASE_LUA), plans, prefix, sink), sink)

    yield make
    for mux in muxes:
        await mux.close()
