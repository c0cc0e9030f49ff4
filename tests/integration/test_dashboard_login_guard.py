"""Log-in throttling counted before the password check, argon2 off the loop,
``next`` hygiene and per-IP grouping, through the real app and Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.dashboard.throttle import ip_group
from tests.helpers.config import MakeConfig
from tests.helpers.dashboard import PASSWORD, User, new_email, parse

AiohttpClient = Callable[..., Any]
PROXIED = {"server": {"trusted_proxies": ["127.0.0.1/32"]}}


async def proxied_app(
    make_config: MakeConfig, aiohttp_client: AiohttpClient, **dashboard: Any
) -> TestClient[Any, Any]:
    """The app behind a (pretend) trusted proxy: X-Forwarded-For picks the client IP."""
    cfg = make_config({**PROXIED, "dashboard": dashboard})
    client: TestClient[Any, Any] = await aiohttp_client(TestServer(create_app(cfg)))
    return client


async def anonymous_token(client: TestClient[Any, Any]) -> str:
    resp = await client.get("/dashboard/login")
    return parse(await resp.text()).find(name="csrf_token").attrs["value"]


async def try_login(
    client: TestClient[Any, Any], token: str | None, email: str, password: str, ip: str = ""
) -> int:
    """One log-in POST; ``token=None`` fetches a fresh anonymous CSRF token first."""
    if token is None:
        token = await anonymous_token(client)
    headers = {"X-Forwarded-For": ip} if ip else {}
    resp = await client.post(
        "/dashboard/login",
        data={"email": email, "password": password, "csrf_token": token},
        headers=headers,
        allow_redirects=False,
    )
    await resp.read()
    if resp.status == 303:
        client.session.cookie_jar.clear()  # logged out again: the next try is anonymous
    return resp.status


async def signed_up(client: TestClient[Any, Any], aiohttp_client: AiohttpClient) -> str:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    await user.post("/dashboard/logout")
    return user.email


@pytest.mark.slow
async def test_parallel_guesses_are_counted_before_any_password_is_checked(
    client: TestClient[Any, Any], aiohttp_client: AiohttpClient
) -> None:
    email = await signed_up(client, aiohttp_client)
    token = await anonymous_token(client)
    statuses = Counter(
        await asyncio.gather(*(try_login(client, token, email, "wrong guess") for _ in range(40)))
    )
    # the limit per (email, IP) is 5: only 5 passwords were ever checked
    assert statuses == {401: 5, 429: 35}, statuses


@pytest.mark.slow
async def test_rpc_stays_fast_while_log_ins_hash(
    make_config: MakeConfig, aiohttp_client: AiohttpClient, api_key: str
) -> None:
    cfg = make_config(
        {
            "plans": {"free": {"rate": 10_000, "burst": 10_000}},
            "dashboard": {"password_hash_wait_s": 60.0},  # a shared, busy test machine
        }
    )
    client = await aiohttp_client(TestServer(create_app(cfg)))
    token = await anonymous_token(client)
    call = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}
    # warm up: the dummy hash is made once per Store, connections open
    await try_login(client, token, new_email(), "warm up password")
    assert (await client.post(f"/bsc/{api_key}", json=call)).status == 200

    async def calls_while(busy: Callable[[], bool]) -> list[float]:
        latencies: list[float] = []
        while busy():
            start = time.perf_counter()
            resp = await client.post(f"/bsc/{api_key}", json=call)
            await resp.read()
            latencies.append(time.perf_counter() - start)
            assert resp.status == 200
            await asyncio.sleep(0.01)
        return latencies

    # The same calls with no log-in first: what this machine gives at this moment.
    until = time.perf_counter() + 1.0
    alone = await calls_while(lambda: time.perf_counter() < until)
    logins = asyncio.gather(
        *(try_login(client, token, new_email(), "some password") for _ in range(19))
    )
    began = time.perf_counter()
    # Let the 19 requests arrive first (the test's client shares this event
    # loop, so their sending is not the server's stall); then measure while
    # argon2 runs.
    await asyncio.sleep(0.3)
    during = await calls_while(lambda: not logins.done())
    statuses = await logins
    took = time.perf_counter() - began
    assert statuses == [401] * 19  # every one was really checked (argon2 ran)

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    def p95(xs: list[float]) -> float:
        return sorted(xs)[int(len(xs) * 0.95)]

    seen = (
        f"eth_blockNumber alone: {len(alone)} calls, median {median(alone) * 1000:.1f} ms, "
        f"p95 {p95(alone) * 1000:.1f} ms; during 19 log-ins ({took:.2f} s): {len(during)} "
        f"calls, median {median(during) * 1000:.1f} ms, p95 {p95(during) * 1000:.1f} ms, "
        f"worst {max(during) * 1000:.1f} ms"
    )
    print("\n" + seen)
    # Argon2 on the event loop (the old code) made the median 466 ms and the
    # worst 6.5 s. The machine these tests run on is shared and often loaded
    # (another suite, stress-ng on every core): a single call can wait for a
    # core whatever the gateway does, so the bar is the median and the 95th
    # percentile and the worst, each against the same calls measured just before, alone.
    assert len(during) >= 5, seen
    assert median(during) < max(0.05, 4 * median(alone)), seen
    assert p95(during) < max(0.1, 4 * p95(alone)), seen
    assert max(during) < max(0.5, 4 * max(alone)), seen


@pytest.mark.slow
async def test_a_stranger_cannot_lock_the_owner_out(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await proxied_app(make_config, aiohttp_client)
    email = await signed_up(client, aiohttp_client)
    for _ in range(5):
        assert await try_login(client, None, email, "wrong guess", "198.51.100.7") == 401
    assert await try_login(client, None, email, "wrong guess", "198.51.100.7") == 429
    assert await try_login(client, None, email, PASSWORD, "198.51.100.7") == 429
    # the owner, elsewhere, has a budget of their own
    assert await try_login(client, None, email, PASSWORD, "203.0.113.9") == 303


@pytest.mark.slow
async def test_per_email_ceiling_spares_a_known_owner(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await proxied_app(make_config, aiohttp_client, login_per_email=4)
    email = await signed_up(client, aiohttp_client)
    assert await try_login(client, None, email, PASSWORD, "203.0.113.9") == 303  # known pair
    for i in range(4):  # slow guessing from many addresses
        assert await try_login(client, None, email, "guess", f"198.51.100.{i + 1}") == 401
    assert await try_login(client, None, email, "guess", "198.51.100.50") == 429
    assert await try_login(client, None, email, PASSWORD, "192.0.2.1") == 429  # new place
    assert await try_login(client, None, email, PASSWORD, "203.0.113.9") == 303  # the owner


@pytest.mark.slow
async def test_right_password_clears_the_pair_and_refunds_the_ip(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await proxied_app(make_config, aiohttp_client, login_per_ip=3)
    emails = [await signed_up(client, aiohttp_client) for _ in range(4)]
    for email in emails:  # an office behind one address: successes are not guesses
        assert await try_login(client, None, email, PASSWORD, "192.0.2.8") == 303
    for email in emails[:3]:
        assert await try_login(client, None, email, "typo", "192.0.2.8") == 401
    assert await try_login(client, None, emails[3], PASSWORD, "192.0.2.8") == 429


def test_ip_groups() -> None:
    assert ip_group("203.0.113.7") == "203.0.113.7"
    assert ip_group("2001:db8:1:2:aaaa::1") == ip_group("2001:db8:1:2:ffff::9")
    assert ip_group("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert ip_group("2001:db8:1:3::1") != ip_group("2001:db8:1:2::1")
    assert ip_group("::ffff:198.51.100.1") == "198.51.100.1"
    assert ip_group("fe80::1%eth0") == "fe80::/64"
    assert ip_group("") == ip_group("not an ip") == "-"


@pytest.mark.slow
async def test_per_ip_limits_group_ipv6_by_64(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await proxied_app(make_config, aiohttp_client, signup_per_ip=2)

    async def signup(ip: str) -> int:
        token = await anonymous_token(client)
        resp = await client.post(
            "/dashboard/signup",
            data={"email": new_email(), "password": PASSWORD, "csrf_token": token},
            headers={"X-Forwarded-For": ip},
            allow_redirects=False,
        )
        await resp.read()
        client.session.cookie_jar.clear()  # a sign-up logs in; the next one is anonymous
        return resp.status

    assert await signup("2001:db8:5:6::1") == 303
    assert await signup("2001:db8:5:6:ffff:ffff:ffff:fffe") == 303
    assert await signup("2001:db8:5:6::abcd") == 429  # same /64: one subscriber
    assert await signup("2001:db8:5:7::1") == 303  # the next /64 is someone else
    # log-ins too: five wrong passwords from one /64, any addresses in it
    email = new_email()
    for i in range(5):
        assert await try_login(client, None, email, "guess", f"2001:db8:9:9::{i + 1}") == 401
    assert await try_login(client, None, email, "guess", "2001:db8:9:9::99") == 429


BAD_NEXT = (
    "/dashboard/usage\r\nSet-Cookie: evil=1",
    "/dashboard/usage\nX: y",
    "/dashboard/\x00",
    "/dashboard/\x7f",
    "/dashboard/a b",
    "/dashboard/\u00e9",
    "//evil.example/dashboard/",
    "/\\evil.example",
    "/dashboard/\\..\\evil",
    "https://evil.example/dashboard/",
    "javascript:alert(1)",
    "/bsc/x",
)


@pytest.mark.slow
async def test_bad_next_is_ignored_without_dropping_the_connection(
    client: TestClient[Any, Any],
    aiohttp_client: AiohttpClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    caplog.set_level(logging.WARNING)
    for target in BAD_NEXT:
        await user.post("/dashboard/logout")
        await user.get("/dashboard/login")
        resp = await user.post(
            "/dashboard/login", {"email": user.email, "password": PASSWORD, "next": target}
        )
        assert resp.status == 303, target
        assert resp.headers["Location"] == "/dashboard/keys", target
        assert "evil" not in resp.headers, target
        # logged in now: the log-in page redirects to ``next`` straight away
        resp = await user.client.get(
            "/dashboard/login", params={"next": target}, allow_redirects=False
        )
        assert resp.status == 303 and resp.headers["Location"] == "/dashboard/keys", target
        await user.get("/dashboard/keys")  # the session's CSRF token for the log-out
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.slow
async def test_good_next_is_still_followed(
    client: TestClient[Any, Any], aiohttp_client: AiohttpClient
) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    await user.post("/dashboard/logout")
    resp = await user.client.get("/dashboard/usage?window=7d", allow_redirects=False)
    doc = await user.get(resp.headers["Location"])  # the log-in page carries ``next``
    target = doc.find(name="next").attrs["value"]
    resp = await user.post(
        "/dashboard/login", {"email": user.email, "password": PASSWORD, "next": target}
    )
    assert resp.headers["Location"] == target == "/dashboard/usage?window=7d"


@pytest.mark.slow
async def test_a_log_in_flood_gets_503_not_a_queue(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    """One hashing thread, 10 ms of patience: the rest are told to come back."""
    client = await proxied_app(
        make_config, aiohttp_client, password_hash_threads=1, password_hash_wait_s=0.01
    )
    token = await anonymous_token(client)

    async def attempt(i: int) -> tuple[int, str]:
        resp = await client.post(
            "/dashboard/login",
            data={"email": new_email(), "password": "a guess", "csrf_token": token},
            headers={"X-Forwarded-For": f"192.0.2.{i + 1}"},
            allow_redirects=False,
        )
        await resp.read()
        return resp.status, resp.headers.get("Retry-After", "")

    results = await asyncio.gather(*(attempt(i) for i in range(6)))
    statuses = Counter(status for status, _ in results)
    assert set(statuses) <= {401, 503} and statuses[503] >= 1, statuses
    assert all(after == "5" for status, after in results if status == 503)
