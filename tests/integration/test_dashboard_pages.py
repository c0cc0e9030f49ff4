"""Dashboard usage, plan and endpoints pages, against real counters and limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import User, new_email, parse
from tests.helpers.lease import settle

AiohttpClient = Callable[..., Any]
CALL = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}


async def new_user(aiohttp_client: AiohttpClient, client: TestClient[Any, Any]) -> User:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    return user


async def call(client: TestClient[Any, Any], key: str, method: str = "eth_blockNumber") -> Any:
    resp = await client.post(f"/bsc/{key}", json={**CALL, "method": method})
    await resp.read()
    return resp


async def test_usage_rises_with_calls(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key(name="counted")
    doc = await user.get("/dashboard/usage")
    assert doc.find(data_testid="usage-detail").attrs["data-key-id"] == key_id
    assert doc.testid("usage-total") == "0"
    for method in ("eth_blockNumber", "eth_blockNumber", "eth_chainId"):
        assert (await call(client, key, method)).status == 200
    await settle(client.app)
    for window in ("24h", "1h"):
        doc = await user.get(f"/dashboard/usage?key={key_id}&window={window}")
        assert doc.testid("usage-total") == "3"
        assert doc.testid("usage-limited") == "0"
        methods = doc.find(data_testid="usage-methods")
        counts = {
            r.attrs["data-method"]: r.tags("td")[1].text
            for r in methods.tags("tr")
            if "data-method" in r.attrs
        }
        assert counts == {"eth_blockNumber": "2", "eth_chainId": "1"}
        chart = doc.find(id="usage-chart")
        assert chart.tag == "svg" and chart.attrs["role"] == "img"
        bars = [r for r in chart.tags("rect") if r.attrs.get("class") == "bar"]
        assert len(bars) == 1 and "3 requests" in bars[0].text
    row = doc.find(data_testid="usage-row", data_key_id=key_id)
    assert "3" in row.text


async def test_usage_counts_rate_limited_calls(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    cfg = make_config({"plans": {"free": {"rate": 0.001, "burst": 2}}})
    client = await aiohttp_client(TestServer(create_app(cfg)))
    user = User(client, new_email())
    await user.signup()
    key, key_id = await user.create_key()
    statuses = [(await call(client, key)).status for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    await settle(client.app)
    doc = await user.get(f"/dashboard/usage?key={key_id}")
    assert doc.testid("usage-total") == "2"
    assert doc.testid("usage-limited") == "2"


@pytest.mark.slow
async def test_usage_day_windows_and_empty_state(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    doc = await user.get("/dashboard/usage")
    assert "no keys" in doc.testid("empty")
    key, key_id = await user.create_key()
    await call(client, key)
    await settle(client.app)
    for window in ("7d", "30d", "bogus"):
        doc = await user.get(f"/dashboard/usage?key={key_id}&window={window}")
        assert doc.testid("usage-total") == "1"


async def test_plan_switch_applies_from_the_next_request(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    assert (await call(client, key)).headers["RateLimit-Policy"].startswith("50;")
    doc = await user.get("/dashboard/plan")
    plans = {p.attrs["data-plan"]: p for p in doc.find_all(data_testid="plan")}
    assert plans["free"].find_all(data_testid="current-plan")
    assert "Free" in plans["free"].tags("h2")[0].text
    assert "Pay as you go" in plans["payg"].tags("h2")[0].text
    assert plans["free"].testid("plan-rate") == "25 units per second"
    assert plans["payg"].testid("plan-burst") == "600 units"
    resp = await user.post("/dashboard/plan", {"plan": "payg"})
    assert resp.headers["Location"] == "/dashboard/plan?msg=plan"
    assert (await call(client, key)).headers["RateLimit-Policy"].startswith("600;")
    doc = await user.get("/dashboard/plan?msg=plan")
    assert "Your plan was changed" in doc.testid("message")
    current = doc.find(data_plan="payg")
    assert current.find_all(data_testid="current-plan")
    key2, _ = await user.create_key()  # new keys start on the account's plan
    assert (await call(client, key2)).headers["RateLimit-Policy"].startswith("600;")


async def test_plan_switch_needs_csrf_and_a_real_plan(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    assert (await user.post("/dashboard/plan", {"plan": "payg"}, csrf="")).status == 403
    assert (await user.post("/dashboard/plan", {"plan": "gold"})).status == 404
    assert (await call(client, key)).headers["RateLimit-Policy"].startswith("50;")


async def test_endpoints_page_lists_both_networks(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    resp = await user.client.get("/dashboard/endpoints")
    html = await resp.text()
    assert key not in html
    doc = parse(html)
    base = f"http://{client.host}:{client.port}"
    assert doc.testid("endpoint-url-bsc") == f"{base}/bsc"
    assert doc.testid("endpoint-url-opbnb") == f"{base}/opbnb"
    assert doc.testid("endpoint-path-bsc") == f"{base}/bsc/<API_KEY>"
    assert doc.testid("endpoint-ws-bsc") == f"ws://{client.host}:{client.port}/bsc/<API_KEY>"
    assert doc.testid("endpoint-ws-opbnb") == f"ws://{client.host}:{client.port}/opbnb/<API_KEY>"
    titles = {h.text.strip() for h in doc.tags("h3")}
    assert {"web3.py", "ethers (v6)", "viem"} <= titles
    codes = "\n".join(c.text for c in doc.tags("code"))
    for snippet in (
        "$RPC_KEY",
        "Authorization: Bearer",
        'os.environ["RPC_KEY"]',
        "process.env.RPC_KEY",
        "Web3.HTTPProvider",
        "JsonRpcProvider",
        "createPublicClient",
        'import { bsc } from "viem/chains"',
        'import { opBNB } from "viem/chains"',
        f"webSocket(`ws://{client.host}:{client.port}/bsc/${{process.env.RPC_KEY}}`)",
        "BNB Smart Chain",
        "opBNB",
    ):
        assert snippet in codes or snippet in doc.text, snippet


async def test_endpoints_use_public_url(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    cfg = make_config({"dashboard": {"public_url": "https://rpc.example.com/"}})
    client = await aiohttp_client(TestServer(create_app(cfg)))
    user = User(client, new_email())
    await user.signup()
    doc = await user.get("/dashboard/endpoints")
    assert doc.testid("endpoint-url-opbnb") == "https://rpc.example.com/opbnb"
    assert doc.testid("endpoint-ws-opbnb") == "wss://rpc.example.com/opbnb/<API_KEY>"


async def test_endpoints_without_websocket_show_no_ws_url(
    make_config: MakeConfig, aiohttp_client: AiohttpClient
) -> None:
    client = await aiohttp_client(TestServer(create_app(make_config({"ws": {"enabled": False}}))))
    user = User(client, new_email())
    await user.signup()
    doc = await user.get("/dashboard/endpoints")
    assert not doc.find_all(data_testid="endpoint-ws-bsc")
    assert "webSocket(" not in "\n".join(c.text for c in doc.tags("code"))


async def test_pages_need_login(client: Client) -> None:
    for path in ("/dashboard/keys", "/dashboard/usage", "/dashboard/plan", "/dashboard/endpoints"):
        resp = await client.get(path, allow_redirects=False)
        assert resp.status == 303
        assert resp.headers["Location"] == f"/dashboard/login?next={path}"


async def test_static_copy_script_is_served(client: Client) -> None:
    resp = await client.get("/dashboard/login")
    doc = parse(await resp.text())
    src = doc.tags("script")[0].attrs["src"]
    resp = await client.get(src)
    assert resp.status == 200
    assert "clipboard" in await resp.text()
    assert "Set-Cookie" not in resp.headers
