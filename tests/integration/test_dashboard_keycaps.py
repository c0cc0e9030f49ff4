"""A key's Limits and Requests pages, and the month's cost on Usage and Plan, through the
real app: forms, CSRF refusal, other accounts' key ids, real RPC calls feeding insight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from gateway.config import Config
from gateway.rpc.auth import generate_key, key_hash
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import Element, User, new_email, parse, wait_for_request_log

AiohttpClient = Callable[..., Any]


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    """Free plan of 1 request/s (burst 3) so a few calls hit the limit; fast insight flush."""
    return make_config(
        # max_wait_s = 0: calls over the plan are refused, not slowed (the log shows them)
        {
            "insight": {"interval_s": 0.05},
            "plans": {"free": {"rate": 1, "burst": 3, "max_wait_s": 0}},
        }
    )


async def new_user(aiohttp_client: AiohttpClient, client: TestClient[Any, Any]) -> User:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    return user


def labels(doc: Element) -> dict[str, str]:
    return {lab.text.strip(): lab.attrs["for"] for lab in doc.tags("label")}


async def row_limits(user: User, key_id: str) -> str:
    doc = await user.get("/dashboard/keys")
    return doc.find(data_key_id=key_id).testid("key-limits")


@pytest.mark.slow
async def test_limits_page_saves_caps_shown_on_the_row(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    _, key_id = await user.create_key(name="capped")
    keys = await user.get("/dashboard/keys")
    row = keys.find(data_key_id=key_id)
    links = {a.text.strip(): a.attrs["href"] for a in row.tags("a")}
    assert links["Limits"] == f"/dashboard/keys/{key_id}/limits"
    assert links["Requests"] == f"/dashboard/keys/{key_id}/requests"
    assert row.testid("key-limits") == "Plan's"

    doc = await user.get(links["Limits"])
    ids = labels(doc)
    assert doc.find(id=ids["Requests per second"]).attrs["value"] == ""
    assert doc.find(id=ids["Daily compute units"]).attrs["value"] == ""
    assert "Save limits" in {b.text.strip() for b in doc.tags("button")}
    resp = await user.post(links["Limits"], {"rate": "0.5", "daily_cu": "1,500"})
    assert resp.status == 303
    assert resp.headers["Location"] == f"/dashboard/keys/{key_id}/limits?saved=1"
    doc = await user.get(resp.headers["Location"])
    assert doc.testid("saved").startswith("Limits saved")
    assert doc.find(id=ids["Requests per second"]).attrs["value"] == "0.5"
    assert doc.find(id=ids["Daily compute units"]).attrs["value"] == "1500"
    assert await row_limits(user, key_id) == "0.5/s · 1,500 CU/day"

    # Only one cap; then empty fields return to the plan's.
    assert (await user.post(links["Limits"], {"rate": "", "daily_cu": "7"})).status == 303
    assert await row_limits(user, key_id) == "7 CU/day"
    assert (await user.post(links["Limits"], {"rate": "", "daily_cu": ""})).status == 303
    assert await row_limits(user, key_id) == "Plan's"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rate", "daily", "words"),
    [
        ("2", "", "at most the Free plan's 1"),
        ("fast", "", "not a number"),
        ("0", "", "positive"),
        ("", "lots", "not a whole number"),
        ("", "0", "at least 1"),
    ],
)
async def test_bad_limits_are_explained_and_change_nothing(
    client: Client, aiohttp_client: AiohttpClient, rate: str, daily: str, words: str
) -> None:
    user = await new_user(aiohttp_client, client)
    _, key_id = await user.create_key()
    await user.get(f"/dashboard/keys/{key_id}/limits")
    resp = await user.post(f"/dashboard/keys/{key_id}/limits", {"rate": rate, "daily_cu": daily})
    assert resp.status == 400
    doc = parse(await resp.text())
    assert words in doc.testid("error")
    assert doc.find(name="rate").attrs["value"] == rate  # what was typed is kept
    assert await row_limits(user, key_id) == "Plan's"


@pytest.mark.slow
async def test_limits_form_refuses_a_wrong_csrf_token(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    alice = await new_user(aiohttp_client, client)
    bob = await new_user(aiohttp_client, client)
    _, key_id = await alice.create_key()
    await alice.get(f"/dashboard/keys/{key_id}/limits")
    for token in ("", bob.csrf, "x" * 43):
        resp = await alice.post(f"/dashboard/keys/{key_id}/limits", {"rate": "1"}, csrf=token)
        assert resp.status == 403
    assert await row_limits(alice, key_id) == "Plan's"


@pytest.mark.slow
async def test_other_accounts_key_ids_answer_404(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    alice = await new_user(aiohttp_client, client)
    mallory = await new_user(aiohttp_client, client)
    _, key_id = await alice.create_key()
    await mallory.get("/dashboard/keys")
    for key in (key_id, "key_000000000000", "..%2f..%2fkeys"):
        await mallory.get(f"/dashboard/keys/{key}/limits", status=404)
        await mallory.get(f"/dashboard/keys/{key}/requests", status=404)
        resp = await mallory.post(f"/dashboard/keys/{key}/limits", {"rate": "1"})
        assert resp.status == 404
    assert await row_limits(alice, key_id) == "Plan's"


async def test_pages_need_a_log_in(client: Client) -> None:
    for page in ("limits", "requests"):
        resp = await client.get(f"/dashboard/keys/key_x/{page}", allow_redirects=False)
        assert resp.status == 303
        assert resp.headers["Location"].startswith("/dashboard/login?next=")


async def _rpc(client: Client, key: str, method: str) -> int:
    call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": []}
    resp = await client.post(f"/bsc/{key}", json=call)
    await resp.read()
    return int(resp.status)


@pytest.mark.slow
async def test_requests_page_shows_real_failed_calls_and_filters(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key()
    path = f"/dashboard/keys/{key_id}/requests"
    doc = await user.get(path)
    assert doc.find_all(data_testid="request-log-empty")

    statuses = [await _rpc(client, key, "eth_blockNumber") for _ in range(6)]
    limited = statuses.count(429)
    assert limited >= 2 and statuses.count(200) >= 3
    assert await _rpc(client, key, "eth_noSuchMethod") in (200, 429)
    doc = await wait_for_request_log(user, path, limited + 1)

    hour = doc.find(data_testid="method-insight", data_window="hour")
    row = hour.find(data_method="eth_blockNumber")
    assert row.testid("calls") == "6"
    assert row.testid("errors") == str(limited)
    assert row.testid("p50").endswith("ms") and row.testid("p99").endswith("ms")
    assert doc.find(data_testid="method-insight", data_window="day").find(
        data_method="eth_blockNumber"
    )

    log = doc.find(data_testid="request-log")
    ids = labels(doc)
    assert doc.find(id=ids["Method"]).attrs["name"] == "method"
    assert doc.find(id=ids["Error code"]).attrs["name"] == "code"
    entries = log.find_all(data_testid="request-log-row")
    assert len(entries) >= limited + 1
    limited_rows = [
        e
        for e in entries
        if e.attrs["data-code"] == "-32005" and e.attrs["data-method"] == "eth_blockNumber"
    ]
    assert len(limited_rows) == limited
    cells = [td.text.strip() for td in limited_rows[0].tags("td")]
    assert cells[1] == "eth_blockNumber" and cells[3] == "429"
    assert cells[5] == "127.0.0.0/24"
    assert key not in await (await user.client.get(path)).text()

    only = await user.get(f"{path}?method=eth_blockNumber&code=-32005")
    got = only.find(data_testid="request-log").find_all(data_testid="request-log-row")
    assert len(got) == limited
    assert {e.attrs["data-method"] for e in got} == {"eth_blockNumber"}
    assert only.find(id=ids["Method"]).attrs["value"] == "eth_blockNumber"
    none = await user.get(f"{path}?method=eth_getLogs")
    assert none.find_all(data_testid="request-log-empty")
    bad = await user.get(f"{path}?code=abc")
    assert "not an error code" in bad.testid("error")


async def test_usage_and_plan_pages_show_the_month_and_the_price(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await new_user(aiohttp_client, client)
    key, _ = await user.create_key()
    assert await _rpc(client, key, "eth_blockNumber") == 200
    doc = await user.get("/dashboard/usage")
    card = doc.find(data_testid="month-cost")
    assert card.testid("month-cu") == "1"
    assert card.testid("month-cost-amount") == "$0.00"  # the free plan costs nothing
    plan = await user.get("/dashboard/plan")
    prices = {
        p.attrs["data-plan"]: p.testid("plan-price") for p in plan.find_all(data_testid="plan")
    }
    assert prices == {"free": "Free", "payg": "$0.50 per million compute units"}
    assert "since the 1st of the month" in plan.find(id="pricing").text
    await user.post("/dashboard/plan", {"plan": "payg"})
    doc = await user.get("/dashboard/usage")
    card = doc.find(data_testid="month-cost")
    assert card.testid("month-cost-amount") == "less than $0.0001"  # 1 CU at $0.50 per million
    assert "$0.50 per million" in card.text


async def test_usage_opens_on_the_key_that_has_traffic(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    """Before, it opened on the newest key, however empty, while an older one had traffic."""
    user = await new_user(aiohttp_client, client)
    busy, busy_id = await user.create_key()
    for _ in range(3):
        assert await _rpc(client, busy, "eth_blockNumber") == 200
    _, empty_id = await user.create_key()  # newer, no traffic
    for _ in range(100):  # usage counts are written by each worker once a second
        doc = await user.get("/dashboard/usage")
        if doc.find(data_testid="usage-detail").testid("usage-total") != "0":
            break
        await asyncio.sleep(0.05)
    assert doc.find(data_testid="usage-detail").attrs["data-key-id"] == busy_id
    assert doc.find(data_testid="usage-detail").testid("usage-total") == "3"
    doc = await user.get(f"/dashboard/usage?key={empty_id}")  # asked for: shown
    assert doc.find(data_testid="usage-detail").attrs["data-key-id"] == empty_id
    # a node's own error answers are not called "upstream errors"
    assert "Upstream errors" not in doc.find(data_testid="usage-detail").text


async def test_made_up_keys_leave_no_insight_behind(
    client: Client, redis: Redis, prefix: str, api_key: str
) -> None:
    for _ in range(5):
        assert await _rpc(client, generate_key(), "eth_blockNumber") == 401
    assert await _rpc(client, api_key, "eth_blockNumber") == 200
    for _ in range(100):  # the real key's call shows up within a few flushes...
        if await redis.keys(f"{prefix}:*:q:f:*"):
            break
        await asyncio.sleep(0.05)
    found: Any = await redis.keys(f"{prefix}:*:q:*")
    # ...and it is the only key with insight: unknown keys are never recorded.
    assert {k.split("}")[0] for k in found} == {f"{prefix}:{{{key_hash(api_key)}"}


@pytest.mark.slow
async def test_the_failed_calls_list_comes_in_pages(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    """Before, all 200 logged calls were one page (about 9,700 pixels tall)."""
    user = await new_user(aiohttp_client, client)
    key, key_id = await user.create_key()
    path = f"/dashboard/keys/{key_id}/requests"
    for _ in range(30):  # each one logged: -32601, or -32005 once the bucket is empty
        await _rpc(client, key, "eth_noSuchMethod")

    def pager_text(doc: Element) -> str:
        found = doc.find_all(data_testid="request-log-pages")
        return " ".join(" ".join(s.text for s in found[0].tags("span")).split()) if found else ""

    for _ in range(100):  # until all 30 are flushed
        doc = await user.get(path)
        if "(30 calls)" in pager_text(doc):
            break
        await asyncio.sleep(0.05)
    assert pager_text(doc) == "Page 1 of 2 (30 calls)"
    assert len(doc.find_all(data_testid="request-log-row")) == 25
    links = {a.attrs.get("rel"): a.attrs["href"] for a in doc.tags("a") if a.attrs.get("rel")}
    assert links.get("next") == "?page=2" and "prev" not in links
    second = await user.get(f"{path}?page=2")
    assert len(second.find_all(data_testid="request-log-row")) == 5
    beyond = await user.get(f"{path}?page=99&method=eth_noSuchMethod")  # clamped, filter kept
    assert len(beyond.find_all(data_testid="request-log-row")) == 5
    links = {a.attrs.get("rel"): a.attrs["href"] for a in beyond.tags("a") if a.attrs.get("rel")}
    assert links.get("prev") == "?method=eth_noSuchMethod&page=1" and "next" not in links
