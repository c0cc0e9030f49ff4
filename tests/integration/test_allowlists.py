"""Allowlist edges, each through the real admit.lua.

Keys are made by ``Store.create_key`` (so entries pass the same normaliser as
the dashboard and CLI) and checked by every admission implementation against a real Redis.
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.config import config_from_dict
from gateway.limits.limiter import Limiter, Status, cidr_bits, ip_bits
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store, StoreError, normalize_origin, normalize_origins
from tests.helpers.limiters import MakeLimiter

T0 = 1_700_000_000_000
OK, NO = Status.ADMITTED, Status.FORBIDDEN


@pytest.fixture
def limiter(make_limiter: MakeLimiter) -> Limiter:
    """Every admission implementation (exact script, leased): one set of rules."""
    return make_limiter(config_from_dict({}).plans).limiter


async def check(
    limiter: Limiter, key: str, origin: str = "", ip: str = "", method: str = "eth_call"
) -> Status:
    d = await limiter.admit(key_hash(key), 1, {method: 1}, origin, ip_bits(ip), now_ms=T0)
    return d.status


ORIGIN_CASES = [
    # entry, Origin header, expected
    ("*.example.com", "https://app.example.com", OK),
    ("*.example.com", "https://a.b.example.com", OK),
    ("*.example.com", "http://app.example.com", OK),  # no scheme in the entry: any
    ("*.example.com", "https://APP.Example.com", OK),  # case-insensitive
    ("*.example.com", "https://evilexample.com", NO),  # dot boundary only
    ("*.example.com", "https://example.com", NO),  # the bare domain: no (as Infura)
    ("*.example.com", "https://app.example.com.evil.io", NO),
    ("*.example.com", "https://app.example.com:8443", NO),  # a port must be listed
    ("*.example.com", "null", NO),
    ("*.example.com", "", NO),
    ("*.example.com:8443", "https://app.example.com:8443", OK),
    ("https://*.example.com", "https://app.example.com", OK),
    ("https://*.example.com", "http://app.example.com", NO),
    ("https://*.example.com", "https://evilexample.com", NO),
    ("app.example.com", "https://app.example.com", OK),
    ("app.example.com", "https://x.app.example.com", NO),
    ("https://app.example.com", "http://app.example.com", NO),
    ("https://app.example.com:443", "https://app.example.com", OK),  # default port
    ("http://localhost:3000", "http://localhost:3000", OK),
    ("*", "https://anything.example", OK),
    ("*", "", OK),  # '*' alone is everything, no Origin included
]


@pytest.mark.parametrize(("entry", "origin", "expected"), ORIGIN_CASES)
async def test_origin_entry(
    limiter: Limiter, store: Store, account: str, entry: str, origin: str, expected: Status
) -> None:
    key, _ = await store.create_key(account, origins=[entry])
    assert await check(limiter, key, origin=origin) is expected


async def test_stored_wildcard_without_a_dot_never_matches_a_longer_name(
    limiter: Limiter, redis: Redis, prefix: str, store: Store, account: str
) -> None:
    """A record written before the normaliser refused ``*example.com``."""
    key, _ = await store.create_key(account, origins=["https://placeholder.example"])
    await redis.hset(record_key(prefix, key_hash(key)), "org", "\n*example.com\n")
    assert await check(limiter, key, origin="https://evilexample.com") is NO
    assert await check(limiter, key, origin="https://x.example.com") is NO


@pytest.mark.parametrize("entry", ["*example.com", "https://*example.com", "a.*.com", "*.", "**"])
def test_wildcards_inside_a_label_are_refused(entry: str) -> None:
    with pytest.raises(StoreError, match="wildcard"):
        normalize_origin(entry)


@pytest.mark.parametrize("entry", ["https://a.example/path", "https://", "a b", "https://a:x"])
def test_non_origins_are_refused(entry: str) -> None:
    with pytest.raises(StoreError, match="not an origin"):
        normalize_origin(entry)


def test_origins_are_normalised() -> None:
    assert normalize_origins(
        ["HTTPS://App.Example.com/", "https://app.example.com:443", "", "http://x.io:80", "*"]
    ) == ("https://app.example.com", "http://x.io", "*")


IP_CASES = [
    # entries, client address, expected
    (["0.0.0.0/0"], "203.0.113.7", OK),
    (["0.0.0.0/0"], "255.255.255.255", OK),
    (["0.0.0.0/0"], "2001:db8::1", NO),  # its own family only
    (["::/0"], "2001:db8::1", OK),
    (["::/0"], "::1", OK),
    (["::/0"], "203.0.113.7", NO),
    (["::/0"], "::ffff:203.0.113.7", NO),  # an IPv4 client, however written
    (["10.0.0.0/8", "::/0"], "2001:db8::1", OK),  # ::/0 next to other CIDRs
    (["10.0.0.0/8", "::/0"], "10.9.9.9", OK),
    (["10.0.0.0/8", "::/0"], "11.0.0.1", NO),
    (["0.0.0.0/0", "2001:db8::/32"], "198.51.100.1", OK),
    (["0.0.0.0/0", "2001:db8::/32"], "2001:db8:1::1", OK),
    (["0.0.0.0/0", "2001:db8::/32"], "2001:dead::1", NO),
    (["0.0.0.0/0", "::/0"], "2001:dead::1", OK),
    (["::ffff:0:0/96"], "192.0.2.1", OK),  # mapped form of 0.0.0.0/0
    (["::ffff:0:0/96"], "2001:db8::1", NO),
    (["192.0.2.1"], "192.0.2.1", OK),
    (["192.0.2.1"], "192.0.2.2", NO),
    (["*"], "2001:db8::1", OK),
    (["*"], "192.0.2.1", OK),
    (["*"], "", OK),
    (["0.0.0.0/0", "::/0"], "", NO),  # an unknown address matches no CIDR
]


@pytest.mark.parametrize(("entries", "ip", "expected"), IP_CASES)
async def test_ip_entries(
    limiter: Limiter,
    store: Store,
    account: str,
    entries: list[str],
    ip: str,
    expected: Status,
) -> None:
    key, _ = await store.create_key(account, ips=entries)
    assert await check(limiter, key, ip=ip) is expected


async def test_ip_entries_stored_before_the_family_mark_still_match(
    limiter: Limiter, redis: Redis, prefix: str, store: Store, account: str
) -> None:
    key, _ = await store.create_key(account, ips=["192.0.2.0/24"])
    legacy = "\n" + cidr_bits("10.0.0.0/8")[1:] + "\n" + cidr_bits("2001:db8::/32")[1:] + "\n"
    await redis.hset(record_key(prefix, key_hash(key)), "ipb", legacy)
    assert await check(limiter, key, ip="10.1.2.3") is OK
    assert await check(limiter, key, ip="2001:db8::9") is OK
    assert await check(limiter, key, ip="11.1.2.3") is NO


async def test_methods_star_and_lists_anded(limiter: Limiter, store: Store, account: str) -> None:
    key, _ = await store.create_key(
        account,
        origins=["*.example.com", "https://b.io"],
        ips=["::/0", "10.0.0.0/8"],
        methods=["*"],
    )
    good = {"origin": "https://a.example.com", "ip": "2001:db8::1"}
    assert await check(limiter, key, **good, method="debug_anything") is OK
    assert await check(limiter, key, origin="https://b.io", ip="10.0.0.1") is OK  # ORed
    assert await check(limiter, key, origin="https://evilexample.com", ip="10.0.0.1") is NO
    assert await check(limiter, key, origin="https://b.io", ip="192.0.2.1") is NO  # ANDed
    assert await check(limiter, key, ip="10.0.0.1") is NO  # no Origin, origin list set
