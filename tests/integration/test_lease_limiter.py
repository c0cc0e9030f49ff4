"""lease.lua + LeaseLimiter against a real Redis: exact across processes, cheap when hot.

Several ``LeaseLimiter`` instances stand for several worker processes (each
has its own cache and leases; only Redis is shared). Time is injected: the
same fake clock drives the script's ``now`` and the limiter's monotonic
clock, so the maths is checked without sleeping.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.config import PlanConfig, config_from_dict
from gateway.limits.allowlists import Allowlists
from gateway.limits.leasing import LeaseLimiter, LeaseSettings
from gateway.limits.limiter import LEASE_LUA, RedisScript, Status, cidr_bits, ip_bits
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from gateway.store.usagesink import UsageSink

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def mono(self) -> float:
        return self.ms / 1000

    def wall(self) -> int:
        return self.ms


def plans(**over: dict[str, object]) -> tuple[PlanConfig, ...]:
    raw: dict[str, dict[str, object]] = {
        "free": {"rate": 100, "burst": 50, "weights": {"eth_getLogs": 5}},
        "payg": {"rate": 1000, "burst": 2000},
    }
    for name, table in over.items():
        raw[name] = {**raw.get(name, {}), **table}
    return config_from_dict({"plans": raw}).plans


class Counted:
    """The script runner, counting round trips."""

    def __init__(self, redis: Redis) -> None:
        self._script = RedisScript(redis, LEASE_LUA)
        self.calls = 0

    async def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        self.calls += 1
        return await self._script(keys, args)


def make(
    redis: Redis, prefix: str, clock: Clock, plan_table: tuple[PlanConfig, ...] | None = None
) -> tuple[LeaseLimiter, Counted, UsageSink]:
    run = Counted(redis)
    sink = UsageSink(redis, prefix, clock_ms=clock.wall)
    limiter = LeaseLimiter(
        run,
        plan_table or plans(),
        prefix,
        sink,
        LeaseSettings(),
        clock=clock.mono,
        wall_ms=clock.wall,
    )
    return limiter, run, sink


async def test_processes_together_never_exceed_the_bucket(
    redis: Redis, prefix: str, api_key: str
) -> None:
    """4 processes hammer one key (rate 100/s, burst 50) for 3 s: within [0.98, 1.00]."""
    clock = Clock()
    procs = [make(redis, prefix, clock)[0] for _ in range(4)]
    khash = key_hash(api_key)
    rng = random.Random(7)
    admitted = 0
    for step in range(3000):  # 1 ms steps
        clock.ms = T0 + step
        for limiter in rng.sample(procs, len(procs)):
            for _ in range(2):
                d = await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms)
                admitted += d.status is Status.ADMITTED
    theory = 50 + 100 * 2.999
    assert admitted <= theory
    assert admitted >= 0.98 * theory, (admitted, theory)


async def test_a_hot_key_under_its_limit_rarely_asks_redis(
    redis: Redis, prefix: str, api_key: str, store: Store, account: str
) -> None:
    clock = Clock()
    await store.set_plan(account, "payg")
    limiter, run, _ = make(redis, prefix, clock, plans(payg={"rate": 100_000, "burst": 100_000}))
    khash = key_hash(api_key)
    admitted = 0
    for step in range(20_000):  # 20k requests at 10k/s
        clock.ms = T0 + step // 10
        d = await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms)
        admitted += d.status is Status.ADMITTED
    assert admitted == 20_000
    assert run.calls <= 20_000 * 0.05, run.calls  # <= 1 round trip per 20 requests


async def test_a_cold_key_pays_one_round_trip(redis: Redis, prefix: str, api_key: str) -> None:
    clock = Clock()
    limiter, run, _ = make(redis, prefix, clock)
    d = await limiter.admit(key_hash(api_key), 1, {"eth_call": 1}, now_ms=clock.ms)
    assert d.status is Status.ADMITTED and d.key_id
    assert run.calls == 1


async def test_revoked_key_is_refused_after_invalidation(
    redis: Redis, prefix: str, store: Store, account: str
) -> None:
    clock = Clock()
    limiter, _, _ = make(redis, prefix, clock)
    key, rec = await store.create_key(account)
    khash = key_hash(key)
    assert (await limiter.admit(khash, 1, {"eth_call": 1})).status is Status.ADMITTED
    await store.revoke_key(rec.id)
    limiter.invalidate(khash)
    assert (await limiter.admit(khash, 1, {"eth_call": 1})).status is Status.UNAUTHORIZED


async def test_idle_leases_go_back_to_the_shared_bucket(
    redis: Redis, prefix: str, api_key: str
) -> None:
    """Units a process leased and did not spend return to the shared bucket when idle.

    The refill is negligible (1 unit per 1,000 s, however slow the machine)
    so the bucket's level shows exactly what came back: a spends 40 of the
    burst of 50 and holds a slice; once its lease went back, b finds the 10
    units a did not spend, not 10 minus the slice.
    """
    clock = Clock()
    # far from the real time: the give-back must use the injected clock, not Redis TIME
    # (a refill over the years between them would fill the bucket)
    start = clock.ms
    slow = plans(free={"rate": 0.001, "burst": 50})
    a, _, _ = make(redis, prefix, clock, slow)
    b, _, _ = make(redis, prefix, clock, slow)
    khash = key_hash(api_key)
    for i in range(40):  # a becomes hot (500/s for 80 ms) and holds a slice
        clock.ms = start + 2 * i
        d = await a.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms)
        assert d.status is Status.ADMITTED
    clock.ms += 300  # past lease_idle_s (0.25 s)
    back = await a.give_back_idle()
    assert back > 0  # a was holding units it had not spent
    got = 0
    for _ in range(20):
        d = await b.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms)
        got += d.status is Status.ADMITTED
    assert got == 50 - 40


async def test_usage_is_flushed_in_the_store_layout(
    redis: Redis, prefix: str, api_key: str, store: Store
) -> None:
    clock = Clock()
    limiter, _, sink = make(redis, prefix, clock)
    khash = key_hash(api_key)
    for _ in range(7):
        await limiter.admit(khash, 1, {"eth_getBalance": 1}, now_ms=clock.ms)
    await sink.flush()
    day_key = f"{prefix}:{{{khash}}}:d:{T0 // 86_400_000}"
    day = await redis.hgetall(day_key)
    assert day["req"] == "7" and day["m:eth_getBalance"] == "7"
    assert int(day["cu"]) >= 7  # reserved by leases


@pytest.mark.parametrize(
    ("entries", "origin", "ok"),
    [
        (("*.example.com",), "https://app.example.com", True),
        (("*.example.com",), "https://evilexample.com", False),
        (("*.example.com",), "https://example.com", False),
        (("https://*.example.com",), "http://app.example.com", False),
        (("app.example.com",), "http://app.example.com", True),
        (("*",), "https://anything.test", True),
        (("*",), "", True),
        (("https://app.example.com",), "https://app.example.com", True),
        (("https://app.example.com",), "http://app.example.com", False),
        (("https://app.example.com",), "", False),
    ],
)
def test_origin_rules(entries: tuple[str, ...], origin: str, ok: bool) -> None:
    assert Allowlists.parse(entries, (), ()).allows((), origin, "") is ok


def test_ip_rules() -> None:
    v4_all = cidr_bits("0.0.0.0/0")
    allow = Allowlists.parse((), (v4_all, cidr_bits("10.0.0.0/8")), ())
    assert allow.allows((), "", ip_bits("192.0.2.1"))
    assert not allow.allows((), "", ip_bits("2001:db8::1"))
    assert not Allowlists.parse((), (cidr_bits("10.0.0.0/8"),), ()).allows(
        (), "", ip_bits("192.0.2.1")
    )
    assert Allowlists.parse((), ("*",), ()).allows((), "", ip_bits("2001:db8::1"))
    assert Allowlists.parse((), (cidr_bits("::/0"),), ()).allows((), "", ip_bits("2001:db8::1"))


async def test_the_keys_own_caps_narrow_the_plan(
    redis: Redis, prefix: str, store: Store, account: str
) -> None:
    """rcap 5/s on a 100/s plan: a burst of 5 then 5/s; dcap 12: the 13th unit is refused."""
    from gateway.redis.keyspace import record_key

    clock = Clock()
    limiter, _, _ = make(redis, prefix, clock)
    key, _ = await store.create_key(account)
    khash = key_hash(key)
    await redis.hset(record_key(prefix, khash), mapping={"rcap": "5", "dcap": "12"})
    got = [await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms) for _ in range(8)]
    assert [d.status for d in got] == [Status.ADMITTED] * 5 + [Status.KEY_RATE_CAPPED] * 3
    assert got[0].limit == 5
    assert got[-1].retry_ms == 200
    clock.ms += 1000
    got = [await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms) for _ in range(8)]
    assert [d.status for d in got].count(Status.ADMITTED) == 5
    clock.ms += 1000
    got = [await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms) for _ in range(5)]
    assert [d.status for d in got] == [Status.ADMITTED] * 2 + [Status.KEY_DAILY_CAPPED] * 3


async def test_rate_limit_figures_follow_every_local_admission(
    redis: Redis, prefix: str, api_key: str, store: Store, account: str
) -> None:
    """``remaining`` drops by the cost on each call served from the lease, and a key
    whose bucket stays full gets the same admitted ``Decision`` back (built once per lease).
    """
    clock = Clock()
    await store.set_plan(account, "payg")
    limiter, run, _ = make(redis, prefix, clock, plans(payg={"rate": 1, "burst": 5000}))
    khash = key_hash(api_key)
    seen = []
    for step in range(2000):  # 10k requests/s: after 50 ms, slices of hundreds of units
        clock.ms = T0 + step // 10
        d = await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms)
        assert d.status is Status.ADMITTED
        seen.append(d.remaining)
    assert run.calls < 700  # most calls were local
    # bucket + lease = burst - spent (the refill of 1/s adds under 1 unit in 200 ms)
    assert all(5000 - i <= r <= 5000 - i + 1 for i, r in enumerate(seen, 1)), [
        (i, r) for i, r in enumerate(seen, 1) if not 5000 - i <= r <= 5000 - i + 1
    ][:10]
    assert seen == sorted(seen, reverse=True) and len(set(seen)) >= 1990

    full, _, _ = make(redis, prefix, clock, plans(payg={"rate": 10**9, "burst": 10**9}))
    decisions = []
    for step in range(1000):  # 1k requests/s, the bucket refilling far faster
        clock.ms = T0 + 10_000 + step  # the bucket is full again by then
        decisions.append(await full.admit(khash, 1, {"eth_call": 1}, now_ms=clock.ms))
    assert all(d.status is Status.ADMITTED for d in decisions)
    assert sum(d.remaining == 10**9 for d in decisions) >= 900  # not on an ask's own call
    reused = sum(a is b for a, b in itertools.pairwise(decisions))
    assert reused >= 850  # one object while the figures hold, a new one after each ask
