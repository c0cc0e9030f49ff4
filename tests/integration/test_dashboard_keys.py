"""Dashboard API keys: create (shown once), list, revoke, rotate, ownership, limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.redis.keyspace import record_key
from gateway.rpc.auth import key_hash
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import User, new_email, parse

AiohttpClient = Callable[..., Any]
CALL = {"jsonrpc": "2.0", "id": 7, "method": "eth_blockNumber", "params": []}


async def new_user(aiohttp_client: AiohttpClient, client: TestClient[Any, Any]) -> User:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    return user


async def rpc_status(client: TestClient[Any, Any], key: str, **headers: str) -> int:
    resp = await client.post(f"/bsc/{key}", json=CALL, headers=headers)
    await resp.read()
    return resp.status


async def test_new_key_is_shown_once_and_works(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key(name="my-dapp", env="staging", expires="30d")
    assert len(key) == 32
    assert await rpc_status(client, key) == 200
    resp = await client.post("/opbnb", json=CALL, headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 200
    page = await user.client.get("/dashboard/keys")
    html = await page.text()
    assert key not in html  # only the hint from now on
    row = parse(html).find(data_key_id=key_id)
    assert row.testid("key-name") == "my-dapp"
    assert row.testid("key-env") == "staging"
    assert row.testid("key-status") == "Active"
    assert row.testid("key-hint") == f"{key[:4]}…{key[-4:]}"
    assert row.testid("key-last-used") != "Never"
    buttons = {b.text.strip() for b in row.tags("button")}
    assert buttons == {"Rotate", "Revoke"}


async def test_create_form_is_accessible(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    doc = await user.get("/dashboard/keys")
    labels = {lab.text.strip(): lab.attrs["for"] for lab in doc.tags("label")}
    for text in (
        "Name",
        "Environment",
        "Expires",
        "Allowed origins",
        "Allowed IP addresses",
        "Allowed methods",
    ):
        assert doc.find(id=labels[text])
    options = [o.text.strip() for o in doc.find(id=labels["Expires"]).tags("option")]
    assert options == ["Never", "7 days", "30 days", "90 days"]
    assert "Create key" in {b.text.strip() for b in doc.tags("button")}


async def test_revoke_needs_confirmation_then_refuses_the_key(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key()
    doc = await user.get(f"/dashboard/keys/{key_id}/revoke")
    assert "Revoke key" in {b.text.strip() for b in doc.tags("button")}
    assert await rpc_status(client, key) == 200  # the confirm page changed nothing
    resp = await user.post(f"/dashboard/keys/{key_id}/revoke")
    assert resp.status == 303 and resp.headers["Location"] == "/dashboard/keys?msg=revoked"
    assert await rpc_status(client, key) == 401
    doc = await user.get("/dashboard/keys?msg=revoked")
    assert "revoked" in doc.testid("message")
    row = doc.find(data_key_id=key_id)
    assert row.testid("key-status") == "Revoked"
    assert not row.tags("button")


async def test_rotate_with_grace_keeps_the_old_key_working(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    old_key, old_id = await user.create_key(name="svc", methods="eth_blockNumber")
    doc = await user.get(f"/dashboard/keys/{old_id}/rotate")
    assert doc.find(id="grace")
    resp = await user.post(f"/dashboard/keys/{old_id}/rotate", {"grace": "24h"})
    assert resp.status == 200
    doc = parse(await resp.text())
    new_key = doc.testid("new-key")
    assert new_key != old_key
    assert "keeps working until" in doc.testid("rotated-note")
    assert await rpc_status(client, old_key) == 200
    assert await rpc_status(client, new_key) == 200
    rows = doc.find_all(data_testid="key-row")
    assert len(rows) == 2
    assert {r.testid("key-name") for r in rows} == {"svc"}
    # same settings: the method allowlist came along
    resp = await client.post(f"/bsc/{new_key}", json={**CALL, "method": "eth_chainId"})
    assert resp.status == 403


async def test_rotate_immediately_refuses_the_old_key(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    old_key, old_id = await user.create_key()
    resp = await user.post(f"/dashboard/keys/{old_id}/rotate", {"grace": "0"})
    new_key = parse(await resp.text()).testid("new-key")
    assert await rpc_status(client, old_key) == 401
    assert await rpc_status(client, new_key) == 200
    rows = await user.key_rows()
    assert rows[old_id] == "Revoked"


@pytest.mark.slow
async def test_other_accounts_keys_answer_404(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    alice = await new_user(aiohttp_client, client)
    mallory = await new_user(aiohttp_client, client)
    key, key_id = await alice.create_key()
    await mallory.get("/dashboard/keys")
    for path in (
        f"/dashboard/keys/{key_id}/revoke",
        f"/dashboard/keys/{key_id}/rotate",
        f"/dashboard/usage?key={key_id}",
        "/dashboard/keys/key_nope/revoke",
    ):
        await mallory.get(path, status=404)
    for path in (f"/dashboard/keys/{key_id}/revoke", f"/dashboard/keys/{key_id}/rotate"):
        resp = await mallory.post(path, {"grace": "0"})
        assert resp.status == 404, path
    assert key_id not in await mallory.key_rows()
    assert (await alice.key_rows())[key_id] == "Active"
    assert await rpc_status(client, key) == 200


@pytest.mark.slow
async def test_wrong_csrf_changes_nothing(client: Client, aiohttp_client: AiohttpClient) -> None:
    alice = await new_user(aiohttp_client, client)
    bob = await new_user(aiohttp_client, client)
    key, key_id = await alice.create_key()
    for token in ("", bob.csrf):
        assert (await alice.post(f"/dashboard/keys/{key_id}/revoke", csrf=token)).status == 403
        assert (await alice.post(f"/dashboard/keys/{key_id}/rotate", csrf=token)).status == 403
        assert (await alice.post("/dashboard/keys", {"name": "x"}, csrf=token)).status == 403
    assert await alice.key_rows() == {key_id: "Active"}
    assert await rpc_status(client, key) == 200


@pytest.mark.slow
async def test_expired_key_shows_expired(
    client: Client, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key(expires="7d")
    row = (await user.get("/dashboard/keys")).find(data_key_id=key_id)
    assert len(row.tags("time")) == 2  # created and expires (never used yet)
    sec, _ = await redis.time()
    # a minute ago: expired, yet well inside the retention of stopped keys
    await redis.hset(record_key(prefix, key_hash(key)), "exp", (int(sec) - 60) * 1000)
    row = (await user.get("/dashboard/keys")).find(data_key_id=key_id)
    assert row.testid("key-status") == "Expired"
    assert {b.text.strip() for b in row.tags("button")} == {"Revoke"}
    assert await rpc_status(client, key) == 401


async def test_key_limit_counts_active_keys(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    cfg = make_config({"dashboard": {"max_keys_per_account": 2}})
    server = await aiohttp_client(TestServer(create_app(cfg)))
    user = User(server, new_email())
    await user.signup()
    await user.create_key(name="a")
    _, second = await user.create_key(name="b")
    resp = await user.post("/dashboard/keys", {"name": "c", "env": "", "expires": "never"})
    assert resp.status == 400
    doc = parse(await resp.text())
    assert "2 active keys" in doc.testid("error")
    assert doc.find(id="key-name").attrs["value"] == "c"
    await user.post(f"/dashboard/keys/{second}/revoke")
    await user.create_key(name="c")
    assert len(await user.key_rows()) == 3


@pytest.mark.slow
async def test_allowlists_from_the_form(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key(
        origins="https://app.example.com\n*.example.org",
        ips="127.0.0.1/32",
        methods="eth_blockNumber, eth_chainId",
    )
    assert await rpc_status(client, key) == 403  # no Origin header
    assert await rpc_status(client, key, Origin="https://app.example.com") == 200
    assert await rpc_status(client, key, Origin="https://x.example.org") == 200
    assert await rpc_status(client, key, Origin="https://evil.example") == 403


async def test_bad_form_input_is_explained_and_kept(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    await user.get("/dashboard/keys")
    for form, words in (
        ({"ips": "10.0.0.0/33"}, "not an IP"),
        ({"methods": "eth call!"}, "not a JSON-RPC method"),
        ({"expires": "forever"}, "expiry"),
    ):
        resp = await user.post("/dashboard/keys", {"name": "kept", "expires": "never", **form})
        assert resp.status == 400
        doc = parse(await resp.text())
        assert words in doc.testid("error")
        assert doc.find(id="key-name").attrs["value"] == "kept"
    assert await user.key_rows() == {}


async def test_default_name_and_environment(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    _, key_id = await user.create_key(name="", env="")
    row = (await user.get("/dashboard/keys")).find(data_key_id=key_id)
    assert row.testid("key-name") == "default"
    assert row.testid("key-env") == "production"
