"""The Security page through the real app: password, sessions, two-step log-in,
account deletion, operator reset links, CSRF and ownership."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
import pyotp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.redis.keyspace import key_tag, record_key
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from gateway.store.security import SecurityStore
from tests.helpers.config import Cli, Client, MakeConfig
from tests.helpers.dashboard import PASSWORD, Element, User, new_email, parse
from tests.helpers.lease import settle, until_status

AiohttpClient = Callable[..., Any]
CALL = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}
NEW_PASSWORD = "a brand new passphrase"
PAGE = "/dashboard/security"


async def new_user(
    aiohttp_client: AiohttpClient, client: TestClient[Any, Any], ua: str = "pytest-browser/1.0"
) -> User:
    user = User(await aiohttp_client(client.server, headers={"User-Agent": ua}), new_email())
    await user.signup()
    return user


async def second_session(aiohttp_client: AiohttpClient, user: User, ua: str = "other/2.0") -> User:
    """The same account logged in from another browser (its own cookie jar)."""
    other = User(await aiohttp_client(user.client.server, headers={"User-Agent": ua}), user.email)
    resp = await other.login()
    assert resp.status == 303
    return other


async def logged_in(user: User) -> bool:
    resp = await user.client.get("/dashboard/keys", allow_redirects=False)
    return resp.status == 200


def labels(doc: Element) -> dict[str, str]:
    return {lab.text.strip(): lab.attrs["for"] for lab in doc.tags("label")}


def buttons(doc: Element) -> set[str]:
    return {b.text.strip() for b in doc.tags("button")}


def code_after(secret: str, steps: int) -> str:
    """A TOTP code ``steps`` time steps from now (the server accepts ±1 step)."""
    return pyotp.TOTP(secret).at(time.time() + 30 * steps)


async def turn_on_two_step(user: User) -> tuple[str, list[str]]:
    """(secret, recovery codes) after going through the page's forms."""
    await user.get(PAGE)
    resp = await user.post(PAGE + "/two-step/start", {"current_password": PASSWORD}, follow=True)
    assert resp.status == 200
    doc = parse(await resp.text())
    secret = doc.testid("totp-secret")
    form = {"code": pyotp.TOTP(secret).now(), "current_password": PASSWORD}
    resp = await user.post(PAGE + "/two-step/confirm", form)
    assert resp.status == 200, await resp.text()
    doc = parse(await resp.text())
    codes = [li.text.strip() for li in doc.find(data_testid="recovery-codes").tags("li")]
    return secret, codes


async def rpc_status(client: TestClient[Any, Any], key: str) -> int:
    resp = await client.post(f"/bsc/{key}", json=CALL)
    await resp.read()
    return resp.status


# -- the page ------------------------------------------------------------------------


async def test_security_page_has_the_contract_labels(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    doc = await user.get("/dashboard/keys")
    nav = doc.find(aria_label="Dashboard")
    assert ("Security", PAGE) in {(a.text.strip(), a.attrs["href"]) for a in nav.tags("a")}
    doc = await user.get(PAGE)
    found = labels(doc)
    for text in ("Current password", "New password", "Type DELETE to confirm"):
        assert text in found, text
        assert doc.find(id=found[text]).tag == "input"
    assert {
        "Change password",
        "Log out other sessions",
        "Turn on two-step log-in",
        "Delete account",
    } <= buttons(doc)
    rows = doc.find_all(data_testid="session-row")
    assert len(rows) == 1 and "This session" in rows[0].text


async def test_security_page_needs_a_log_in(client: Client) -> None:
    resp = await client.get(PAGE, allow_redirects=False)
    assert resp.status == 303
    assert resp.headers["Location"] == "/dashboard/login?next=/dashboard/security"


# -- password ------------------------------------------------------------------------


@pytest.mark.slow
async def test_change_password_ends_other_sessions(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    other = await second_session(aiohttp_client, user)
    await user.get(PAGE)

    resp = await user.post(
        PAGE + "/password", {"current_password": "wrong password", "new_password": NEW_PASSWORD}
    )
    assert resp.status == 400
    assert parse(await resp.text()).testid("error") == "The current password is wrong."
    resp = await user.post(
        PAGE + "/password", {"current_password": PASSWORD, "new_password": "short"}
    )
    assert resp.status == 400 and "at least 8" in parse(await resp.text()).testid("error")
    assert await logged_in(other)  # failed attempts changed nothing

    resp = await user.post(
        PAGE + "/password", {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    )
    assert resp.status == 303 and resp.headers["Location"] == PAGE + "?done=password"
    doc = await user.get(resp.headers["Location"])
    assert "Every other session was logged out" in doc.testid("message")
    assert await logged_in(user)
    assert not await logged_in(other)

    stranger = User(await aiohttp_client(client.server), user.email)
    assert (await stranger.login(PASSWORD)).status == 401
    assert (await stranger.login(NEW_PASSWORD)).status == 303


@pytest.mark.slow
async def test_wrong_passwords_on_the_page_are_capped(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.get(PAGE)
    form = {"current_password": "wrong password", "new_password": NEW_PASSWORD}
    for _ in range(10):
        assert (await user.post(PAGE + "/password", form)).status == 400
    form["current_password"] = PASSWORD  # even the right one is not checked now
    resp = await user.post(PAGE + "/password", form)
    assert resp.status == 429
    assert "Too many wrong passwords" in parse(await resp.text()).testid("error")


# -- sessions ------------------------------------------------------------------------


@pytest.mark.slow
async def test_sessions_table_lists_each_browser(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client, ua="Firefox/140 test")
    await second_session(aiohttp_client, user, ua="Chromium/156 other")
    doc = await user.get(PAGE)
    rows = doc.find_all(data_testid="session-row")
    assert len(rows) == 2
    current = [r for r in rows if r.attrs.get("data-current") == "true"]
    assert len(current) == 1 and "This session" in current[0].text
    assert current[0].testid("session-ua") == "Firefox/140 test"
    other = next(r for r in rows if r is not current[0])
    assert other.testid("session-ua") == "Chromium/156 other"
    assert "This session" not in other.text
    for row in rows:
        assert row.testid("session-ip") == "127.0.0.0/24"  # the network, not the address
        assert len(row.tags("time")) == 2  # created, last seen


@pytest.mark.slow
async def test_log_out_other_sessions(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    others = [await second_session(aiohttp_client, user) for _ in range(2)]
    await user.get(PAGE)
    resp = await user.post(PAGE + "/sessions/end-others")
    assert resp.status == 303
    doc = await user.get(resp.headers["Location"])
    assert len(doc.find_all(data_testid="session-row")) == 1
    assert await logged_in(user)
    for other in others:
        assert not await logged_in(other)


@pytest.mark.slow
async def test_one_session_logs_out_and_foreign_ids_are_404(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    other = await second_session(aiohttp_client, user)
    mallory = await new_user(aiohttp_client, client)
    doc = await user.get(PAGE)
    ref = next(
        r.attrs["data-session"]
        for r in doc.find_all(data_testid="session-row")
        if r.attrs.get("data-current") != "true"
    )
    own_ref = next(
        r.attrs["data-session"]
        for r in doc.find_all(data_testid="session-row")
        if r.attrs.get("data-current") == "true"
    )
    # Another account naming this session: the same 404 as an id that never existed.
    await mallory.get(PAGE)
    for target in (ref, "0" * 64, "nonsense"):
        resp = await mallory.post(f"{PAGE}/sessions/{target}/end")
        assert resp.status == 404, target
    assert await logged_in(other)
    # The current session has no "Log out" of its own here (the header button does that).
    assert (await user.post(f"{PAGE}/sessions/{own_ref}/end")).status == 404
    resp = await user.post(f"{PAGE}/sessions/{ref}/end")
    assert resp.status == 303
    assert not await logged_in(other)
    assert await logged_in(user)


@pytest.mark.slow
async def test_last_seen_is_written_at_most_once_per_interval(
    make_config: MakeConfig, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    for interval, moves in ((0, True), (60, False)):
        cfg = make_config({"dashboard": {"session_seen_interval_s": interval}})
        client = await aiohttp_client(TestServer(create_app(cfg)))
        user = User(client, new_email())
        await user.signup()
        session_id = client.session.cookie_jar.filter_cookies(client.make_url("/dashboard/"))[
            "gw_session"
        ].value
        key = f"{prefix}:s:{hashlib.sha256(session_id.encode()).hexdigest()}"
        first = await redis.hget(key, "seen")
        assert first
        await asyncio.sleep(0.01)
        await user.get("/dashboard/keys")
        assert ((await redis.hget(key, "seen")) != first) is moves, interval


async def test_ended_session_is_not_brought_back_by_last_seen(store: Store, account: str) -> None:
    sec = SecurityStore(store)
    session_id, _ = await store.create_session(account, 3600)
    await sec.track_session(account, session_id, "2001:db8:1:2::7", "ua", 3600)
    assert len(await sec.sessions(account, session_id)) == 1
    await store.end_session(session_id)
    await sec.touch_session(session_id)  # a request that was in flight when it ended
    assert await store.session(session_id) is None
    key = f"{store.prefix}:s:{SecurityStore.session_ref(session_id)}"
    assert not await store.redis.exists(key)  # no TTL-less husk left behind
    assert await sec.sessions(account, "") == []  # and the index forgets it


# -- two-step log-in -----------------------------------------------------------------


async def test_turn_on_two_step_log_in(
    client: Client, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.get(PAGE)
    resp = await user.post(PAGE + "/two-step/start", {"current_password": PASSWORD})
    assert resp.status == 303
    doc = await user.get(PAGE)
    secret = doc.testid("totp-secret")
    assert len(secret) == 32
    svg = doc.find(data_testid="totp-qr").tags("svg")
    assert svg and svg[0].tags("path")  # the QR code, inline, rendered by the server
    assert "Code" in labels(doc) and "Confirm" in buttons(doc)
    assert not doc.find_all(data_testid="recovery-codes")

    form = {"code": "000000", "current_password": PASSWORD}
    resp = await user.post(PAGE + "/two-step/confirm", form)
    assert resp.status == 400
    form["code"] = pyotp.TOTP(secret).now()
    resp = await user.post(PAGE + "/two-step/confirm", form)
    assert resp.status == 200
    doc = parse(await resp.text())
    codes = [li.text.strip() for li in doc.find(data_testid="recovery-codes").tags("li")]
    assert len(codes) == 10 and len(set(codes)) == 10
    assert "on" in doc.testid("two-step-status")

    # Shown once; stored only as hashes.
    doc = await user.get(PAGE)
    assert not doc.find_all(data_testid="recovery-codes")
    assert not doc.find_all(data_testid="totp-secret")
    dump: list[str] = []
    async for key in redis.scan_iter(f"{prefix}:*"):
        kind = await redis.type(key)
        if kind == "set":
            dump += map(str, await redis.smembers(key))
        elif kind == "hash":
            dump += map(str, (await redis.hgetall(key)).values())
    for code in codes:
        assert code not in dump and code.replace("-", "") not in dump


@pytest.mark.slow
async def test_log_in_asks_for_the_code_on_a_second_page(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    secret, codes = await turn_on_two_step(user)
    await user.post("/dashboard/logout")

    again = User(await aiohttp_client(client.server), user.email)
    await again.get("/dashboard/login?next=/dashboard/usage")
    resp = await again.post(
        "/dashboard/login",
        {"email": user.email, "password": PASSWORD, "next": "/dashboard/usage"},
    )
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/login/code"
    assert "gw_session" not in {c.key for c in again.client.session.cookie_jar}
    assert not await logged_in(again)
    doc = await again.get("/dashboard/login/code")
    assert "Code" in labels(doc)

    resp = await again.post("/dashboard/login/code", {"code": "123456"})
    assert resp.status == 401 and "not right" in parse(await resp.text()).testid("error")
    used = code_after(secret, 1)
    resp = await again.post("/dashboard/login/code", {"code": used})
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/usage"
    assert await logged_in(again)
    # The pending log-in is spent: the code page now sends back to the password.
    resp = await again.client.get("/dashboard/login/code", allow_redirects=False)
    assert resp.headers["Location"] == "/dashboard/keys"

    # The same code again (a replay) is refused; a recovery code works once. The
    # replay sends the very string used above: computing it again could land in
    # the next 30 s step and give a new, rightly accepted code.
    third = User(await aiohttp_client(client.server), user.email)
    assert (await third.login()).status == 303
    await third.get("/dashboard/login/code")
    replay = await third.post("/dashboard/login/code", {"code": used})
    assert replay.status == 401
    resp = await third.post("/dashboard/login/code", {"code": codes[0].upper()})
    assert resp.status == 303 and await logged_in(third)

    fourth = User(await aiohttp_client(client.server), user.email)
    assert (await fourth.login()).status == 303
    await fourth.get("/dashboard/login/code")
    assert (await fourth.post("/dashboard/login/code", {"code": codes[0]})).status == 401
    assert not await logged_in(fourth)


@pytest.mark.slow
async def test_too_many_wrong_codes_start_over(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    secret, _ = await turn_on_two_step(user)
    other = User(await aiohttp_client(client.server), user.email)
    assert (await other.login()).status == 303
    await other.get("/dashboard/login/code")
    for _ in range(4):
        assert (await other.post("/dashboard/login/code", {"code": "999999"})).status == 401
    resp = await other.post("/dashboard/login/code", {"code": "999999"})
    assert resp.status == 401
    assert "Too many wrong codes" in parse(await resp.text()).testid("error")
    # The right code no longer helps: the password must be typed again.
    resp = await other.post("/dashboard/login/code", {"code": code_after(secret, 1)})
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/login"
    assert not await logged_in(other)


async def test_code_page_without_a_password_goes_back(client: Client) -> None:
    resp = await client.get("/dashboard/login/code", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/login"


async def test_turning_two_step_on_needs_the_password(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    """A stolen session cookie alone can neither start nor confirm two-step log-in:
    the attacker's authenticator is never bound to the account."""
    user = await new_user(aiohttp_client, client)
    doc = await user.get(PAGE)
    start = doc.find(action=PAGE + "/two-step/start")
    assert {i.attrs.get("name") for i in start.tags("input")} >= {"current_password"}
    for form in ({}, {"current_password": "wrong password"}, {"password": PASSWORD}):
        resp = await user.post(PAGE + "/two-step/start", form)
        assert resp.status == 400, form
        doc = parse(await resp.text())
        assert doc.testid("error") == "The current password is wrong."
        assert not doc.find_all(data_testid="totp-secret")
    assert not (await user.get(PAGE)).find_all(data_testid="totp-secret")

    resp = await user.post(PAGE + "/two-step/start", {"current_password": PASSWORD})
    assert resp.status == 303
    secret = (await user.get(PAGE)).testid("totp-secret")
    code = pyotp.TOTP(secret).now()
    for form in ({"code": code}, {"code": code, "current_password": "wrong password"}):
        resp = await user.post(PAGE + "/two-step/confirm", form)
        assert resp.status == 400, form
        assert not parse(await resp.text()).find_all(data_testid="recovery-codes")
    doc = await user.get(PAGE)  # still waiting for a confirmation, not on
    assert doc.testid("totp-secret") == secret and not doc.find_all(data_testid="two-step-status")
    # The owner still logs in with the password alone.
    assert (await User(await aiohttp_client(client.server), user.email).login()).status == 303


@pytest.mark.slow
async def test_new_recovery_codes_need_the_password(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    _, old = await turn_on_two_step(user)
    doc = await user.get(PAGE)
    assert "New recovery codes" in buttons(doc)
    for form in ({}, {"current_password": "wrong password"}):
        resp = await user.post(PAGE + "/two-step/recovery-codes", form)
        assert resp.status == 400, form
        assert not parse(await resp.text()).find_all(data_testid="recovery-codes")
    resp = await user.post(PAGE + "/two-step/recovery-codes", {"current_password": PASSWORD})
    assert resp.status == 200
    doc = parse(await resp.text())
    new = [li.text.strip() for li in doc.find(data_testid="recovery-codes").tags("li")]
    assert len(new) == 10 and not set(new) & set(old)
    assert not (await user.get(PAGE)).find_all(data_testid="recovery-codes")  # shown once
    # The old codes are gone; a new one logs in once.
    for code, status in ((old[0], 401), (new[0], 303)):
        other = User(await aiohttp_client(client.server), user.email)
        assert (await other.login()).status == 303
        await other.get("/dashboard/login/code")
        resp = await other.post("/dashboard/login/code", {"code": code})
        assert resp.status == status, code


@pytest.mark.slow
async def test_turn_off_two_step_needs_the_password(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await turn_on_two_step(user)
    doc = await user.get(PAGE)
    assert "Current password" in labels(doc)
    for form in ({}, {"password": PASSWORD}, {"current_password": "wrong password"}):
        resp = await user.post(PAGE + "/two-step/off", form)
        assert resp.status == 400, form
        assert parse(await resp.text()).testid("error") == "The current password is wrong."
    assert "on" in (await user.get(PAGE)).testid("two-step-status")
    resp = await user.post(PAGE + "/two-step/off", {"current_password": PASSWORD})
    assert resp.status == 303
    doc = await user.get(resp.headers["Location"])
    assert "off" in doc.testid("two-step-status")
    await user.post("/dashboard/logout")
    assert (await user.login()).status == 303
    assert await logged_in(user)


# -- deletion ------------------------------------------------------------------------


@pytest.mark.slow
async def test_delete_account_revokes_keys_and_keeps_usage_anonymous(
    client: Client, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    user = await new_user(aiohttp_client, client)
    keys = [await user.create_key(name=f"app-{i}") for i in range(3)]
    for key, _ in keys:
        assert await rpc_status(client, key) == 200
    other = await second_session(aiohttp_client, user)
    await user.get(PAGE)

    bad = [
        ({"current_password": PASSWORD, "confirm": "delete"}, "Type DELETE"),
        ({"current_password": "wrong password", "confirm": "DELETE"}, "password is wrong"),
        ({"password": PASSWORD, "confirm": "DELETE"}, "password is wrong"),
    ]
    for form, needle in bad:
        resp = await user.post(PAGE + "/delete", form)
        assert resp.status == 400 and needle in parse(await resp.text()).testid("error")
    assert all([await rpc_status(client, k) == 200 for k, _ in keys])

    resp = await user.post(PAGE + "/delete", {"current_password": PASSWORD, "confirm": "DELETE"})
    assert resp.status == 200
    assert "3 keys revoked" in parse(await resp.text()).testid("message")
    for key, _ in keys:  # every process hears of the revocation within a second
        await until_status(functools.partial(rpc_status, client, key), 401)
    assert not await logged_in(user) and not await logged_in(other)
    assert (await User(await aiohttp_client(client.server), user.email).login()).status == 401

    # Nothing that names the person is left; usage stays, under an anonymous owner.
    await settle(client.app)
    owners: set[str] = set()
    for key, _ in keys:
        record = await redis.hgetall(record_key(prefix, key_hash(key)))
        assert record["rev"] and "name" not in record and "hint" not in record
        owners.add(str(record["acct"]))
        day = [k async for k in redis.scan_iter(f"{key_tag(prefix, key_hash(key))}d:*")]
        assert day and int(await redis.hget(day[0], "req") or 0) == 2  # both calls above
    assert len(owners) == 1 and owners.pop().startswith("deleted_")
    async for key in redis.scan_iter(f"{prefix}:*"):
        kind = await redis.type(key)
        values = (
            list((await redis.hgetall(key)).values())
            if kind == "hash"
            else [await redis.get(key)]
            if kind == "string"
            else []
        )
        assert user.email not in key and user.email not in values, key

    # The email is free again.
    again = User(await aiohttp_client(client.server), user.email)
    await again.signup()


@pytest.mark.slow
async def test_delete_with_two_step_needs_a_code(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    secret, _ = await turn_on_two_step(user)
    doc = await user.get(PAGE)
    assert "Code" in labels(doc)
    form = {"current_password": PASSWORD, "confirm": "DELETE", "code": "000000"}
    resp = await user.post(PAGE + "/delete", form)
    assert resp.status == 400 and "code is wrong" in parse(await resp.text()).testid("error")
    assert await rpc_status(client, key) == 200
    form["code"] = code_after(secret, 1)
    assert (await user.post(PAGE + "/delete", form)).status == 200
    assert await rpc_status(client, key) == 401


# -- CSRF on every new form ----------------------------------------------------------


@pytest.mark.slow
async def test_every_security_form_refuses_a_missing_or_wrong_csrf_token(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    other = await second_session(aiohttp_client, user)
    doc = await user.get(PAGE)
    ref = next(
        r.attrs["data-session"]
        for r in doc.find_all(data_testid="session-row")
        if r.attrs.get("data-current") != "true"
    )
    forms = {
        "/password": {"current_password": PASSWORD, "new_password": NEW_PASSWORD},
        "/sessions/end-others": {},
        f"/sessions/{ref}/end": {},
        "/two-step/start": {"current_password": PASSWORD},
        "/two-step/confirm": {"code": "123456", "current_password": PASSWORD},
        "/two-step/off": {"current_password": PASSWORD},
        "/two-step/recovery-codes": {"current_password": PASSWORD},
        "/delete": {"current_password": PASSWORD, "confirm": "DELETE"},
    }
    actions = {f.attrs["action"] for f in doc.tags("form") if f.attrs.get("method") == "post"}
    assert {PAGE + p for p in forms} >= actions - {"/dashboard/logout"}
    for path, form in forms.items():
        for token in ("", "x" * 43, user.csrf[:-1]):
            resp = await user.post(PAGE + path, form, csrf=token)
            assert resp.status == 403, (path, token)
    assert await logged_in(other) and await rpc_status(client, key) == 200
    assert not (await user.get(PAGE)).find_all(data_testid="totp-secret")
    # The anonymous forms (code page, reset page) need their token too.
    stranger = User(await aiohttp_client(client.server), user.email)
    for path in ("/dashboard/login/code", "/dashboard/reset"):
        resp = await stranger.post(path, {"code": "123456", "token": "x"}, csrf="")
        assert resp.status == 403, path


# -- operator reset links ------------------------------------------------------------


@pytest.mark.slow
async def test_reset_password_link_works_once(
    cli: Cli, client: Client, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    user = await new_user(aiohttp_client, client)
    code, out, _ = await asyncio.to_thread(
        cli, "accounts", "reset-password", user.email.upper(), "--json"
    )
    assert code == 0
    value = orjson.loads(out)
    assert value["email"] == user.email
    url = urlsplit(value["url"])
    assert url.path == "/dashboard/reset" and url.query.startswith("token=")
    ttls = [await redis.ttl(k) async for k in redis.scan_iter(f"{prefix}:r:*")]
    assert len(ttls) == 1 and 3590 <= ttls[0] <= 3600
    token = url.query.removeprefix("token=")
    assert token not in str([k async for k in redis.scan_iter(f"{prefix}:*")])

    visitor = User(await aiohttp_client(client.server), user.email)
    doc = await visitor.get(f"/dashboard/reset?{url.query}")
    assert doc.testid("reset-email") == user.email
    assert "New password" in labels(doc)
    resp = await visitor.post("/dashboard/reset", {"token": token, "new_password": "short"})
    assert resp.status == 400  # a typo does not spend the link
    resp = await visitor.post("/dashboard/reset", {"token": token, "new_password": NEW_PASSWORD})
    assert resp.status == 200 and "was changed" in parse(await resp.text()).testid("message")
    assert not await logged_in(user)  # every session ended

    resp = await visitor.post("/dashboard/reset", {"token": token, "new_password": "x" * 20})
    assert resp.status == 404
    assert (await visitor.client.get(f"/dashboard/reset?{url.query}")).status == 404
    assert (await visitor.login(PASSWORD)).status == 401
    assert (await visitor.login(NEW_PASSWORD)).status == 303


def test_reset_password_cli_text_and_unknown_email(cli: Cli) -> None:
    assert cli("accounts", "create", "ops@example.com", stdin="a long password\n")[0] == 0
    code, out, _ = cli("accounts", "reset-password", "ops@example.com")
    assert code == 0
    assert "valid 60 min" in out
    assert out.strip().splitlines()[-1].startswith("http://127.0.0.1:8545/dashboard/reset?token=")
    code, _, err = cli("accounts", "reset-password", "nobody@example.com")
    assert code == 1 and "no account" in err


async def test_bad_reset_tokens_answer_404(client: Client) -> None:
    for query in ("", "?token=", "?token=nope", "?token=" + "\x01" * 5, "?token=" + "a" * 500):
        resp = await client.get(f"/dashboard/reset{query}")
        assert resp.status == 404, query


# -- limits and odd input ------------------------------------------------------------


@pytest.mark.slow
async def test_oldest_sessions_end_past_the_cap(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    cfg = make_config({"dashboard": {"max_sessions_per_account": 2}})
    client = await aiohttp_client(TestServer(create_app(cfg)))
    first = User(client, new_email())
    await first.signup()
    second = await second_session(aiohttp_client, first)
    third = await second_session(aiohttp_client, first)
    assert not await logged_in(first)  # the oldest made room
    assert await logged_in(second) and await logged_in(third)
    doc = await third.get(PAGE)
    assert len(doc.find_all(data_testid="session-row")) == 2


@pytest.mark.slow
async def test_odd_codes_answer_cleanly(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    await turn_on_two_step(user)
    other = User(await aiohttp_client(client.server), user.email)
    assert (await other.login()).status == 303
    await other.get("/dashboard/login/code")
    for code in ("١٢٣٤٥٦", "x" * 5000, "", "\x00\x01", "12 34 56"):
        resp = await other.post("/dashboard/login/code", {"code": code})
        assert resp.status == 401, code
    # Wrong codes count like wrong passwords: the email is throttled now.
    assert (await other.login()).status == 429
    await user.get(PAGE)
    form = {"current_password": PASSWORD, "confirm": "DELETE", "code": "١٢٣٤٥٦"}
    assert (await user.post(PAGE + "/delete", form)).status == 400
    form = {"code": "١٢٣٤٥٦", "current_password": PASSWORD}
    assert (await user.post(PAGE + "/two-step/confirm", form)).status == 400
