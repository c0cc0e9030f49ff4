"""Dashboard sign-up, log-in, sessions, CSRF and headers, through the real app."""

from __future__ import annotations

import socket
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import PASSWORD, User, new_email, parse

AiohttpClient = Callable[..., Any]


async def new_user(aiohttp_client: AiohttpClient, client: TestClient[Any, Any]) -> User:
    """A user with its own cookie jar on the same live server."""
    return User(await aiohttp_client(client.server), new_email())


def set_cookies(resp: Any) -> dict[str, Any]:
    jar: SimpleCookie = SimpleCookie()
    for header in resp.headers.getall("Set-Cookie", []):
        jar.load(header)
    return {name: morsel for name, morsel in jar.items()}


async def test_signup_logs_in_with_a_hardened_cookie(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    resp = await user.signup()
    assert resp.headers["Location"] == "/dashboard/keys?msg=welcome"
    cookie = set_cookies(resp)["gw_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax"
    assert cookie["path"] == "/dashboard" and not cookie["secure"]
    doc = await user.get("/dashboard/keys?msg=welcome")
    links = {a.text.strip() for a in doc.find(aria_label="Dashboard").tags("a")}
    assert {"API Keys", "Usage", "Plan"} <= links
    assert "Log out" in {b.text.strip() for b in doc.tags("button")}
    assert doc.testid("account-email") == user.email
    assert doc.find_all(data_testid="empty")


async def test_secure_cookies_when_configured(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    cfg = make_config({"dashboard": {"secure_cookies": True}})
    client = await aiohttp_client(TestServer(create_app(cfg)))
    resp = await client.get("/dashboard/login")
    assert set_cookies(resp)["gw_csrf"]["secure"]
    user = User(client, new_email())
    csrf = parse(await resp.text()).find(name="csrf_token").attrs["value"]
    # The jar will not send a Secure cookie over http, so send it by hand.
    resp = await client.post(
        "/dashboard/signup",
        allow_redirects=False,
        data={"email": user.email, "password": PASSWORD, "csrf_token": csrf},
        headers={"Cookie": f"gw_csrf={csrf}"},
    )
    assert resp.status == 303
    cookie = set_cookies(resp)["gw_session"]
    assert cookie["secure"] and cookie["httponly"]


@pytest.mark.slow
async def test_wrong_password_shows_error_and_sets_no_session(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.post("/dashboard/logout")
    resp = await user.login("not the password")
    assert resp.status == 401
    assert "gw_session" not in set_cookies(resp)
    assert parse(await resp.text()).testid("error") == "Wrong email or password."
    resp = await user.client.get("/dashboard/keys", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"].startswith("/dashboard/login")


@pytest.mark.slow
async def test_failed_logins_are_throttled_per_email(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.post("/dashboard/logout")
    for _ in range(5):
        assert (await user.login("wrong password")).status == 401
    resp = await user.login()  # even the right password waits now
    assert resp.status == 429
    assert int(resp.headers["Retry-After"]) > 0
    assert "Too many failed log-ins" in parse(await resp.text()).testid("error")
    assert "gw_session" not in set_cookies(resp)
    other = await new_user(aiohttp_client, client)  # another email is not locked out
    await other.signup()
    await other.post("/dashboard/logout")
    assert (await other.login()).status == 303


@pytest.mark.slow
async def test_failed_logins_are_throttled_per_ip(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    guesser = await new_user(aiohttp_client, client)
    await guesser.get("/dashboard/login")
    for i in range(20):
        resp = await guesser.post(
            "/dashboard/login", {"email": f"victim{i}@example.com", "password": "guess123"}
        )
        assert resp.status == 401
    resp = await guesser.post(
        "/dashboard/login", {"email": "victim99@example.com", "password": "guess123"}
    )
    assert resp.status == 429


@pytest.mark.slow
async def test_successful_login_clears_the_email_counter(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.post("/dashboard/logout")
    for _ in range(4):
        await user.login("typo typo")
    assert (await user.login()).status == 303
    await user.post("/dashboard/logout")
    for _ in range(4):
        assert (await user.login("typo again")).status == 401
    assert (await user.login()).status == 303


@pytest.mark.slow
async def test_login_rotates_the_session_id(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    first = set_cookies(await user.signup())["gw_session"].value
    resp = await user.login()  # logging in again while logged in
    assert resp.status == 303
    second = set_cookies(resp)["gw_session"].value
    assert second != first
    replay = await aiohttp_client(client.server)
    resp = await replay.get(
        "/dashboard/keys", allow_redirects=False, headers={"Cookie": f"gw_session={first}"}
    )
    assert resp.status == 303  # the old id is dead


@pytest.mark.slow
async def test_planted_session_id_is_never_adopted(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.post("/dashboard/logout")
    user.client.session.cookie_jar.update_cookies({"gw_session": "attacker-chosen"})
    resp = await user.login()
    assert set_cookies(resp)["gw_session"].value != "attacker-chosen"


async def test_logout_kills_the_session_server_side(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    session_id = set_cookies(await user.signup())["gw_session"].value
    await user.get("/dashboard/keys")
    resp = await user.post("/dashboard/logout")
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/login?msg=logged-out"
    replay = await aiohttp_client(client.server)
    resp = await replay.get(
        "/dashboard/keys", allow_redirects=False, headers={"Cookie": f"gw_session={session_id}"}
    )
    assert resp.status == 303 and resp.headers["Location"].startswith("/dashboard/login")
    doc = await user.get("/dashboard/login?msg=logged-out")
    assert doc.testid("message") == "You have been logged out."


async def test_csrf_is_required_for_every_state_change(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.get("/dashboard/signup")
    resp = await user.post(
        "/dashboard/signup", {"email": user.email, "password": PASSWORD}, csrf=""
    )
    assert resp.status == 403
    assert "gw_session" not in set_cookies(resp)
    await user.signup()
    await user.get("/dashboard/keys")
    for token in ("", "x" * 43, user.csrf[:-1]):
        for path in ("/dashboard/logout", "/dashboard/keys", "/dashboard/plan"):
            resp = await user.post(path, {"name": "x", "plan": "payg"}, csrf=token)
            assert resp.status == 403, path
    assert await user.key_rows() == {}  # still logged in, nothing created


async def test_anonymous_form_needs_its_cookie_token(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    """A cross-site form cannot know or set the visitor's CSRF cookie."""
    attacker = await aiohttp_client(client.server)
    resp = await attacker.get("/dashboard/login")
    token = parse(await resp.text()).find(name="csrf_token").attrs["value"]
    victim = await aiohttp_client(client.server)
    resp = await victim.post(
        "/dashboard/login",
        allow_redirects=False,
        data={"email": "a@example.com", "password": "x" * 10, "csrf_token": token},
    )
    assert resp.status == 403


async def test_no_cors_and_strict_headers_on_dashboard(client: Client) -> None:
    for path in ("/dashboard/login", "/dashboard/keys", "/dashboard/nope"):
        resp = await client.get(
            path, headers={"Origin": "https://evil.example"}, allow_redirects=False
        )
        assert not any(h.lower().startswith("access-control-") for h in resp.headers), path
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
    resp = await client.options(
        "/dashboard/keys",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert resp.status == 405
    assert "Access-Control-Allow-Origin" not in resp.headers
    resp = await client.get("/dashboard/login")
    assert resp.headers["Cache-Control"] == "no-store"


async def test_rpc_paths_set_no_cookies(client: Client, api_key: str) -> None:
    await client.get("/dashboard/login")
    resp = await client.post(
        f"/bsc/{api_key}", json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}
    )
    assert resp.status == 200
    assert "Set-Cookie" not in resp.headers


async def test_signup_errors_are_explained(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    dup = await new_user(aiohttp_client, client)
    await dup.get("/dashboard/signup")
    cases = [
        ({"email": user.email, "password": PASSWORD}, 409, "already exists"),
        ({"email": "not-an-email", "password": PASSWORD}, 400, "not an email"),
        ({"email": new_email(), "password": "short"}, 400, "at least 8"),
    ]
    for form, status, words in cases:
        resp = await dup.post("/dashboard/signup", form)
        assert resp.status == status
        doc = parse(await resp.text())
        assert words in doc.testid("error")
        assert doc.find(id="email").attrs["value"] == form["email"]


@pytest.mark.slow
async def test_next_only_follows_dashboard_paths(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.post("/dashboard/logout")
    resp = await user.client.get("/dashboard/usage", allow_redirects=False)
    assert resp.headers["Location"] == "/dashboard/login?next=/dashboard/usage"
    for target, expected in (
        ("/dashboard/usage", "/dashboard/usage"),
        ("https://evil.example/", "/dashboard/keys"),
    ):
        await user.get("/dashboard/login")
        resp = await user.post(
            "/dashboard/login", {"email": user.email, "password": PASSWORD, "next": target}
        )
        assert resp.headers["Location"] == expected
        await user.post("/dashboard/logout")


async def test_root_and_home_redirect(client: Client) -> None:
    resp = await client.get("/", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/dashboard/"
    for path in ("/dashboard", "/dashboard/"):
        resp = await client.get(path, allow_redirects=False)
        assert resp.headers["Location"] == "/dashboard/login"


async def test_redis_down_shows_a_page_not_a_traceback(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{sock.getsockname()[1]}"
    cfg = make_config({"redis": {"url": dead}})
    client = await aiohttp_client(TestServer(create_app(cfg)))
    resp = await client.get("/dashboard/login", headers={"Cookie": "gw_session=abc"})
    assert resp.status == 503
    text = await resp.text()
    assert "Service unavailable" in text and "Traceback" not in text


async def test_user_text_is_escaped(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    await user.signup()
    await user.create_key(name="<b>bold</b>", env="<i>x</i>")
    html = await (await user.client.get("/dashboard/keys")).text()
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
