"""The admin API on the metrics listener: tokens, nodes, accounts and keys, the audit log.

The real app (``create_app``) with real mock nodes and the test Redis; the
admin API reached over HTTP on the metrics listener (port 0), as an
operator's curl would.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

import gateway.app
from gateway import typedefs as T
from gateway.admin import add_admin_routes, admin_source, audit, caller
from gateway.config import Config
from gateway.demo.mocknode import MockNode
from gateway.plugin import Parts
from gateway.redis.embedded import free_port
from tests.helpers.admin import AdminStack, Tokens, admin_tokens
from tests.helpers.config import Cli, MakeConfig


@pytest.fixture
def tokens() -> Tokens:
    return admin_tokens()


@pytest.fixture
def admin_config(
    make_config: MakeConfig, tokens: Tokens, mock_nodes: dict[str, MockNode]
) -> Config:
    # the node URL carries credentials: the listing must never show them
    url = mock_nodes["bsc"].url.replace("http://", "http://ops:hunter2secret@")
    return make_config({"admin": tokens.table()}, upstreams={"bsc": [url]})


@pytest.fixture
async def stack(admin_config: Config) -> AsyncIterator[AdminStack]:
    s = await AdminStack(admin_config).start()
    yield s
    await s.close()


async def test_every_call_needs_a_known_token(
    stack: AdminStack, tokens: Tokens, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.admin")
    status, body = await stack.call("GET", "/nodes", None)
    assert status == 401 and "error" in body
    status, body = await stack.call("GET", "/nodes", "not-a-token")
    assert status == 401 and "error" in body
    status, _ = await stack.call("GET", "/nodes", tokens.read)
    assert status == 200
    status, body = await stack.call("POST", "/nodes/bsc/bsc-0/cordon", tokens.read)
    assert status == 403 and "ops-read" in body["error"]
    status, body = await stack.call("GET", "/no-such-thing", tokens.read)
    assert status == 404 and "error" in body
    logged = caplog.text
    assert "token=ops-read" in logged and "status=403" in logged and "status=401" in logged
    assert tokens.read not in logged and tokens.write not in logged and "not-a-token" not in logged


async def test_the_public_port_has_no_admin_api(stack: AdminStack, tokens: Tokens) -> None:
    url = str(stack.server.make_url("/admin/nodes"))
    headers = {"Authorization": f"Bearer {tokens.read}"}
    async with stack.session.get(url, headers=headers) as resp:
        assert resp.status == 404
        assert "bsc-0" not in await resp.text()  # the JSON 404 of an unknown path


async def test_no_tokens_configured_answers_401(make_config: MakeConfig) -> None:
    s = await AdminStack(make_config()).start()
    try:
        status, body = await s.call("GET", "/nodes", "anything")
        assert status == 401 and body["error"] == "no admin token configured"
    finally:
        await s.close()


async def test_nodes_lists_every_node_without_credentials(
    stack: AdminStack, tokens: Tokens
) -> None:
    status, body = await stack.call("GET", "/nodes", tokens.read)
    assert status == 200
    nets = {n["network"]: n for n in body["networks"]}
    assert set(nets) == {"bsc", "opbnb"}
    (node,) = nets["bsc"]["nodes"]
    assert node["name"] == "bsc-0"
    assert node["state"] == "current" and node["in_service"] is True and node["why"] is None
    assert node["head"] > 0 and node["cordoned"] is None
    assert set(node["latency_ms"]) == {"p50", "p95"} and "max_logs_range" in node["limits"]
    assert "hunter2secret" not in str(body)


async def test_accounts_and_keys_as_the_cli_does_them(
    stack: AdminStack, tokens: Tokens, cli: Cli
) -> None:
    w = tokens.write
    status, acct = await stack.call(
        "POST", "/accounts", w, {"email": "Ops@Example.com", "password": "long enough pw"}
    )
    assert status == 201 and acct["email"] == "ops@example.com"
    status, body = await stack.call(
        "POST", "/accounts", w, {"email": "ops@example.com", "password": "long enough pw"}
    )
    assert status == 400 and "error" in body  # the store's own rule: one account per email
    status, body = await stack.call("POST", "/accounts", w, {"email": "x@example.com"})
    assert status == 400 and "password" in body["error"]
    status, body = await stack.call("GET", "/accounts", tokens.read)
    assert status == 200 and "ops@example.com" in [a["email"] for a in body["accounts"]]
    status, body = await stack.call("PATCH", "/accounts/ops@example.com", w, {"plan": "payg"})
    assert status == 200 and body["plan"] == "payg"
    status, body = await stack.call("PATCH", "/accounts/ops@example.com", w, {"plan": "gold"})
    assert status == 400 and "unknown plan" in body["error"]

    status, key = await stack.call(
        "POST", "/keys", w, {"account": "ops@example.com", "name": "app", "methods": ["eth_call"]}
    )
    assert status == 201 and key["key"] and key["name"] == "app"
    rpc_status, _, _ = await stack.rpc(key["key"], "eth_call", [{"to": "0x" + "1" * 40}, "latest"])
    assert rpc_status == 200  # the new key works on the public port at once
    status, listed = await stack.call("GET", "/keys?account=ops@example.com", tokens.read)
    assert status == 200 and [k["id"] for k in listed["keys"]] == [key["id"]]
    assert "key" not in listed["keys"][0]  # the secret is shown once, in the POST answer only
    status, body = await stack.call("PATCH", f"/keys/{key['id']}", w, {"rate_cap": 5})
    assert status == 200 and body["rate_cap"] == 5
    status, rotated = await stack.call("POST", f"/keys/{key['id']}/rotate", w, {"grace_ms": 0})
    assert status == 201 and rotated["replaces"] == key["id"] and rotated["key"] != key["key"]
    status, body = await stack.call("DELETE", f"/keys/{rotated['id']}", w)
    assert status == 200 and body["status"] == "revoked"
    status, body = await stack.call("DELETE", "/keys/k_nope", w)
    assert status == 404

    code, out, _ = await asyncio.to_thread(
        cli, "keys", "list", "--account", "ops@example.com", "--json"
    )
    assert code == 0 and rotated["id"] in out  # the CLI sees what the API did: one store

    status, body = await stack.call("DELETE", "/accounts/ops@example.com", w)
    assert status == 200 and body["deleted"] is True
    status, _ = await stack.call("GET", "/accounts/ops@example.com", tokens.read)
    assert status == 404


async def test_every_write_is_audited_by_token_name(
    stack: AdminStack, tokens: Tokens, cli: Cli
) -> None:
    await stack.call("POST", "/nodes/bsc/bsc-0/cordon", tokens.write)
    await stack.call("POST", "/nodes/bsc/bsc-0/uncordon", tokens.write)
    await stack.call("POST", "/nodes/bsc/bsc-0/cordon", tokens.read)  # refused: still audited
    await stack.call("GET", "/nodes", tokens.read)  # a read: not audited
    status, body = await stack.call("GET", "/audit?limit=10", tokens.read)
    assert status == 200
    got = [(e["who"], e["action"], e["target"], e["status"]) for e in body["entries"]]
    assert got[:3] == [
        (
            "ops-read",
            "POST /admin/nodes/{network}/{name}/cordon",
            "/admin/nodes/{network}/{name}/cordon",
            403,
        ),
        ("ops-write", "uncordon", "bsc/bsc-0", 200),
        ("ops-write", "cordon", "bsc/bsc-0", 200),
    ]
    assert all(isinstance(e["at"], int) for e in body["entries"])
    assert tokens.write not in str(body)
    code, out, _ = await asyncio.to_thread(cli, "audit", "--limit", "2")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2 and "ops-read" in lines[0] and "uncordon" in lines[1]
    code, out, _ = await asyncio.to_thread(cli, "audit", "--json", "--limit", "3")
    assert code == 0 and '"cordon"' in out


async def test_a_plug_in_adds_admin_routes_behind_the_same_guard(
    admin_config: Config, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam another module uses: its own plug-in calls ``add_admin_routes``."""

    async def hello(request: web.Request) -> web.Response:
        audit(request, "hello", "world", times=1)
        pools = admin_source(request)[T.POOLS]
        nets = sorted(pools)
        return web.json_response({"caller": caller(request).name, "networks": nets})

    def routes(admin: web.Application) -> None:
        admin.router.add_post("/hello", hello)

    def plug_hello(app: web.Application, parts: Parts) -> None:
        add_admin_routes(app, routes)

    monkeypatch.setattr(gateway.app, "PLUGINS", (*gateway.app.PLUGINS, plug_hello))
    s = await AdminStack(admin_config).start()
    try:
        assert (await s.call("POST", "/hello", None))[0] == 401
        assert (await s.call("POST", "/hello", tokens.read))[0] == 403
        status, body = await s.call("POST", "/hello", tokens.write)
        assert status == 200 and body == {"caller": "ops-write", "networks": ["bsc", "opbnb"]}
        _, log = await s.call("GET", "/audit?limit=1", tokens.read)
        (last,) = log["entries"]
        assert (last["who"], last["action"], last["target"]) == ("ops-write", "hello", "world")
        assert last["detail"] == {"times": 1}
    finally:
        await s.close()


async def test_reload_without_a_config_source_says_so(stack: AdminStack, tokens: Tokens) -> None:
    """An app built in code (no ``gateway serve``) has no file to read again."""
    status, body = await stack.call("POST", "/reload", tokens.write)
    assert status == 409 and "no config file" in body["error"]


async def test_bad_bodies_get_json_errors(stack: AdminStack, tokens: Tokens) -> None:
    headers = {"Authorization": f"Bearer {tokens.write}", "Content-Type": "application/json"}
    url = stack.admin_url + "/accounts"
    for raw in (b"{not json", b"[1, 2]", b'{"email": 5, "password": "long enough pw"}'):
        async with stack.session.post(url, data=raw, headers=headers) as resp:
            assert resp.status == 400
            assert "error" in await resp.json()
    big = io.BytesIO(b"x" * (2 << 20))  # over the admin API's 1 MiB
    async with stack.session.post(url, data=big, headers=headers) as resp:
        assert resp.status == 413


async def test_redis_down_answers_503_and_the_listing_still_works(
    make_config: MakeConfig, tokens: Tokens
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    cfg = make_config({"admin": tokens.table(), "redis": {"url": dead}})
    s = await AdminStack(cfg).start()
    try:
        status, body = await s.call("POST", "/nodes/bsc/bsc-0/cordon", tokens.write)
        assert status == 503 and "Redis" in body["error"]
        status, body = await s.call("GET", "/nodes", tokens.read)
        assert status == 200 and body["networks"][0]["nodes"][0]["cordoned"] is None
    finally:
        await s.close()


async def test_a_key_in_an_admin_path_reaches_no_log_and_no_audit_entry(
    stack: AdminStack, tokens: Tokens, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator who pastes an API key where a key id goes: the answers are 404 and
    403, and neither the log nor the audit log holds the key (they name the endpoint's
    pattern, never the path as sent)."""
    caplog.set_level(logging.INFO, "gateway")
    status, _ = await stack.call("GET", f"/keys/{api_key}", tokens.read)
    assert status == 404
    status, _ = await stack.call("POST", f"/keys/{api_key}/rotate", tokens.read)
    assert status == 403
    status, _ = await stack.call("DELETE", f"/keys/{api_key}", tokens.write)
    assert status == 404
    status, _ = await stack.call("POST", f"/{api_key}", None)
    assert status == 401
    status, body = await stack.call("GET", "/audit?limit=10", tokens.read)
    assert status == 200 and body["entries"], body
    assert api_key not in str(body)
    assert "/admin/keys/{key_id}/rotate" in str(body)
    assert api_key not in caplog.text
