"""admit.lua against a real Redis: bucket maths with injected time, no sleeps."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.config import PlanConfig, config_from_dict
from gateway.limits.limiter import Limiter, Status, cidr_bits, ip_bits
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.limiters import MakeLimiter, UnderTest

T0 = 1_700_000_000_000  # an injected "now" in ms


def plans(**over: dict[str, object]) -> tuple[PlanConfig, ...]:
    raw: dict[str, dict[str, object]] = {
        "free": {"rate": 10, "burst": 20, "weights": {"eth_getLogs": 5}},
        "payg": {"rate": 100, "burst": 200},
    }
    for name, table in over.items():
        raw[name] = {**raw.get(name, {}), **table}
    return config_from_dict({"plans": raw}).plans


@pytest.fixture
def under_test(make_limiter: MakeLimiter) -> UnderTest:
    """Every test runs against every admission implementation (tests/helpers/limiters.py)."""
    return make_limiter(plans())


@pytest.fixture
def limiter(under_test: UnderTest) -> Limiter:
    return under_test.limiter


async def admit(
    limiter: Limiter,
    key: str,
    now: int,
    method: str = "eth_call",
    n: int = 1,
    origin: str = "",
    ip_bits: str = "",
) -> Status:
    d = await limiter.admit(key_hash(key), n, {method: n}, origin, ip_bits, now_ms=now)
    return d.status


async def test_unknown_key_is_unauthorized(limiter: Limiter) -> None:
    d = await limiter.admit(key_hash("x" * 32), 1, {"eth_call": 1}, now_ms=T0)
    assert d.status is Status.UNAUTHORIZED


async def test_bucket_admits_burst_then_refills_at_rate(limiter: Limiter, api_key: str) -> None:
    statuses = [await admit(limiter, api_key, T0) for _ in range(25)]
    assert statuses.count(Status.ADMITTED) == 20  # burst
    assert statuses[20:] == [Status.RATE_LIMITED] * 5
    # 10 rps: after 350 ms, 3 tokens are back (3.5 -> floor 3 admits)
    later = [await admit(limiter, api_key, T0 + 350) for _ in range(5)]
    assert later.count(Status.ADMITTED) == 3
    # a full refill after burst/rate seconds, never above burst
    full = [await admit(limiter, api_key, T0 + 60_000) for _ in range(25)]
    assert full.count(Status.ADMITTED) == 20


async def test_limited_answer_says_when_to_retry(limiter: Limiter, api_key: str) -> None:
    for _ in range(20):
        await admit(limiter, api_key, T0)
    d = await limiter.admit(key_hash(api_key), 1, {"eth_call": 1}, now_ms=T0)
    assert d.status is Status.RATE_LIMITED
    assert d.retry_ms == 100  # one token at 10/s
    assert d.limit == 20 and d.remaining == 0


async def test_weights_and_batch_cost_are_charged_as_a_whole(
    limiter: Limiter, api_key: str
) -> None:
    khash = key_hash(api_key)
    d = await limiter.admit(khash, 4, {"eth_getLogs": 3, "eth_call": 1}, now_ms=T0)  # 16 units
    assert d.status is Status.ADMITTED and d.remaining == 4
    d = await limiter.admit(khash, 2, {"eth_getLogs": 1, "eth_call": 1}, now_ms=T0)  # 6 > 4
    assert d.status is Status.RATE_LIMITED and d.remaining == 4  # nothing was taken
    d = await limiter.admit(khash, 30, {"eth_call": 30}, now_ms=T0 + 10_000)  # 30 > burst 20
    assert d.status is Status.TOO_EXPENSIVE


async def test_a_refused_dear_call_never_holds_back_a_cheap_one_that_fits(
    limiter: Limiter, api_key: str
) -> None:
    """16 of 20 units spent; a 5-unit eth_getLogs is refused, yet a 1-unit call
    right after it is admitted (the leased limiter once remembered the refusal
    for every call until the dear one's retry time). A second dear call is
    still refused, and the cheap ones stop at the bucket's floor."""
    khash = key_hash(api_key)
    assert (await limiter.admit(khash, 16, {"eth_call": 16}, now_ms=T0)).status is Status.ADMITTED
    dear = await limiter.admit(khash, 1, {"eth_getLogs": 1}, now_ms=T0)
    assert dear.status is Status.RATE_LIMITED and dear.retry_ms == 100  # 1 more unit at 10/s
    cheap = [await admit(limiter, api_key, T0) for _ in range(5)]
    assert cheap == [Status.ADMITTED] * 4 + [Status.RATE_LIMITED]
    assert await admit(limiter, api_key, T0, "eth_getLogs") is Status.RATE_LIMITED


async def test_a_weight_by_pattern_is_charged_on_every_call(
    make_limiter: MakeLimiter, api_key: str
) -> None:
    """``debug_trace* = 5``: each call costs 5, the first (a cold lease) and the
    ones a warm lease admits locally alike (the local path once charged 1)."""
    limiter = make_limiter(plans(free={"weights": {"debug_trace*": 5}})).limiter
    khash = key_hash(api_key)
    got = [await limiter.admit(khash, 1, {"debug_traceCall": 1}, now_ms=T0) for _ in range(5)]
    assert [d.status for d in got] == [Status.ADMITTED] * 4 + [Status.RATE_LIMITED]  # 4 x 5 = 20
    assert got[-1].remaining < 5


async def test_daily_quota(make_limiter: MakeLimiter, store: Store, account: str) -> None:
    limiter = make_limiter(plans(free={"daily_quota": 3})).limiter
    key, _ = await store.create_key(account)
    day_start = (T0 // 86_400_000 + 1) * 86_400_000
    now = day_start - 10_000
    got = [await admit(limiter, key, now + i * 1000) for i in range(5)]
    assert got == [Status.ADMITTED] * 3 + [Status.QUOTA_EXCEEDED] * 2
    d = await limiter.admit(key_hash(key), 1, {"eth_call": 1}, now_ms=now + 5000)
    assert d.retry_ms == day_start - (now + 5000)
    assert await admit(limiter, key, day_start + 1) is Status.ADMITTED  # new UTC day


async def test_revoked_and_expired_keys(under_test: UnderTest, store: Store, account: str) -> None:
    limiter = under_test.limiter
    key, rec = await store.create_key(account, expires_in_ms=60_000)
    now = await store.now_ms()
    assert await admit(limiter, key, now) is Status.ADMITTED
    assert await admit(limiter, key, now + 61_000) is Status.UNAUTHORIZED
    await store.revoke_key(rec.id)
    under_test.changed(key)
    assert await admit(limiter, key, now) is Status.UNAUTHORIZED


async def test_plan_switch_applies_on_next_request(
    under_test: UnderTest, store: Store, account: str, api_key: str
) -> None:
    limiter = under_test.limiter
    got = [await admit(limiter, api_key, T0) for _ in range(21)]
    assert got[-1] is Status.RATE_LIMITED
    await store.set_plan(account, "payg")
    under_test.changed(api_key)
    d = await limiter.admit(key_hash(api_key), 1, {"eth_call": 1}, now_ms=T0)
    # the new plan applies at once, to the bucket's old (empty) level
    assert d.status is Status.RATE_LIMITED and d.plan == "payg" and d.limit == 200
    d = await limiter.admit(key_hash(api_key), 1, {"eth_call": 1}, now_ms=T0 + 10)
    assert d.status is Status.ADMITTED and d.plan == "payg"  # payg's 100/s refill


async def test_allowlists_are_anded_entries_ored(
    limiter: Limiter, store: Store, account: str
) -> None:
    key, _ = await store.create_key(
        account,
        origins=["https://app.example.com", "*.dapp.io"],
        ips=["10.0.0.0/8", "2001:db8::/32"],
        methods=["eth_call", "eth_getBalance"],
    )
    good_origin, good_ip = "https://app.example.com", ip_bits("10.1.2.3")
    assert await admit(limiter, key, T0, origin=good_origin, ip_bits=good_ip) is Status.ADMITTED
    assert (
        await admit(limiter, key, T0, origin="https://x.dapp.io", ip_bits=ip_bits("2001:db8::1"))
        is Status.ADMITTED
    )
    assert (
        await admit(limiter, key, T0, origin="https://evil.com", ip_bits=good_ip)
        is Status.FORBIDDEN
    )
    assert await admit(limiter, key, T0, origin="", ip_bits=good_ip) is Status.FORBIDDEN
    assert (
        await admit(limiter, key, T0, origin=good_origin, ip_bits=ip_bits("11.0.0.1"))
        is Status.FORBIDDEN
    )
    assert (
        await admit(limiter, key, T0, "eth_blockNumber", origin=good_origin, ip_bits=good_ip)
        is Status.FORBIDDEN
    )


def test_ip_bits_map_ipv4_into_ipv6() -> None:
    assert ip_bits("10.1.2.3").startswith(cidr_bits("10.0.0.0/8"))
    assert not ip_bits("11.1.2.3").startswith(cidr_bits("10.0.0.0/8"))
    assert ip_bits("::ffff:10.1.2.3") == ip_bits("10.1.2.3")
    assert ip_bits("not an ip") == ""
    assert cidr_bits("0.0.0.0/0") == "4" + "0" * 80 + "1" * 16
    assert cidr_bits("::/0") == "6"


async def test_usage_counters(under_test: UnderTest, store: Store, account: str) -> None:
    limiter = under_test.limiter
    key, rec = await store.create_key(account)
    now = await store.now_ms()
    khash = key_hash(key)
    await limiter.admit(khash, 3, {"eth_call": 2, "eth_chainId": 1}, now_ms=now)
    for _ in range(30):
        await limiter.admit(khash, 1, {"eth_call": 1}, now_ms=now)
    await under_test.flush()  # leased admission sums usage in-process, written each second
    usage = await store.usage(rec.id)
    assert usage.total == 3 + 17  # 20 burst units, 3 + 17 admitted
    assert usage.limited == 13
    assert usage.methods == {"eth_call": 19, "eth_chainId": 1}
    assert (await store.get_key(rec.id)).last_used_at == now


async def test_noscript_after_script_flush_is_reloaded(
    limiter: Limiter, redis: Redis, api_key: str
) -> None:
    assert await admit(limiter, api_key, T0) is Status.ADMITTED
    await redis.script_flush()
    assert await admit(limiter, api_key, T0) is Status.ADMITTED


async def test_key_record_holds_only_the_hash(redis: Redis, prefix: str, api_key: str) -> None:
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
    assert keys and not any(api_key in k for k in keys)
    for k in keys:
        if await redis.type(k) == "hash":
            values = await redis.hgetall(k)
            assert not any(api_key in str(v) for v in values.values())
    assert await redis.exists(record_key(prefix, key_hash(api_key)))


async def test_a_probe_checks_the_key_and_charges_nothing(
    limiter: Limiter, store: Store, account: str, api_key: str
) -> None:
    """No calls and no methods (the WebSocket upgrade): state checked, no unit taken."""
    khash = key_hash(api_key)
    for _ in range(30):
        d = await limiter.admit(khash, 0, {}, now_ms=T0)
        assert d.status is Status.ADMITTED
    got = [await admit(limiter, api_key, T0) for _ in range(21)]
    assert got.count(Status.ADMITTED) == 20  # the whole burst is still there
    d = await limiter.admit(key_hash("Z" * 32), 0, {}, now_ms=T0)
    assert d.status is Status.UNAUTHORIZED


NOTE = {"eth_subscription": 1}


async def test_a_charge_meters_whatever_the_allowlists_say(
    under_test: UnderTest, store: Store, account: str
) -> None:
    """Notifications are metered by key state and bucket; no allowlist has a say."""
    limiter = under_test.limiter
    key, rec = await store.create_key(
        account,
        origins=["https://app.example"],
        ips=["192.0.2.0/24"],
        methods=["eth_subscribe", "eth_unsubscribe"],
    )
    khash = key_hash(key)
    now = await store.now_ms()  # usage is read by today's date
    assert (await limiter.admit(khash, 1, NOTE, now_ms=now)).status is Status.FORBIDDEN
    got = [(await limiter.charge(khash, NOTE, now_ms=now)).status for _ in range(21)]
    assert got == [Status.ADMITTED] * 20 + [Status.RATE_LIMITED]  # the burst, then no more
    d = await limiter.charge(khash, {"eth_subscription": 5}, now_ms=now + 500)
    assert d.status is Status.ADMITTED  # 5 units refilled in 0.5 s at 10/s
    await under_test.flush()
    usage = await store.usage(rec.id)
    assert usage.methods.get("eth_subscription") == 25
    assert usage.total == 0  # a charge is not a request
    await store.revoke_key(rec.id)
    under_test.changed(key)
    assert (await limiter.charge(khash, NOTE, now_ms=now + 2000)).status is Status.UNAUTHORIZED
