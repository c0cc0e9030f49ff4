"""Usage export per key and day: the CSV and JSON from the Usage page and ``gateway usage
--csv`` hold the same totals as the Usage page, after a real client's calls, some of
them refused by the key's limit."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable
from typing import Any

import pytest

from gateway.config import Config
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import User, new_email

AiohttpClient = Callable[..., Any]
QUOTA = 12  # compute units a day: the knob this test is about (refusals to export)


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    return make_config({"plans": {"free": {"daily_quota": QUOTA}}})


async def _detail(user: User, key_id: str, want_total: str) -> dict[str, str]:
    """The Usage page's 30-day counts once its total shows ``want_total`` (flushed each second)."""
    seen = ""
    for _ in range(200):
        card = (await user.get(f"/dashboard/usage?key={key_id}&window=30d")).find(
            data_testid="usage-detail"
        )
        seen = card.testid("usage-total")
        if seen == want_total:
            names = ("usage-total", "usage-cu", "usage-limited", "usage-errors")
            return {name: card.testid(name).replace(",", "") for name in names}
        await asyncio.sleep(0.05)
    raise AssertionError(f"usage-total {seen!r}, not {want_total!r}")


def _totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    days = [r for r in rows if r["method"] == "*"]
    return {
        "calls": sum(int(r["calls"]) for r in days),
        "units": sum(int(r["units"]) for r in days),
        "rate_limited": sum(int(r["rate_limited"]) for r in days),
    }


async def test_the_export_adds_up_to_the_usage_page(
    client: Client, aiohttp_client: AiohttpClient, cli: Callable[..., tuple[int, str, str]]
) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    key, key_id = await user.create_key()
    statuses = []
    for i in range(9):  # 1 unit each, then 3 for the logs: the quota's 12 exactly
        resp = await client.post(
            f"/bsc/{key}", json={"jsonrpc": "2.0", "id": i, "method": "eth_chainId"}
        )
        statuses.append(resp.status)
    logs = {"jsonrpc": "2.0", "id": 9, "method": "eth_getLogs", "params": [{}]}  # 3 units
    statuses.append((await client.post(f"/bsc/{key}", json=logs)).status)
    for i in range(3):  # over the day's quota: refused, counted as rate-limited
        resp = await client.post(
            f"/bsc/{key}", json={"jsonrpc": "2.0", "id": i, "method": "eth_chainId"}
        )
        statuses.append(resp.status)
    assert statuses.count(429) == 3, statuses
    page = await _detail(user, key_id, "10")

    resp = await user.client.get(f"/dashboard/usage/export?key={key_id}&window=30d&format=csv")
    assert resp.status == 200 and resp.content_type == "text/csv"
    text = await resp.text()
    assert text.splitlines()[0] == "day,key_id,method,calls,units,rate_limited,errors"
    rows = list(csv.DictReader(io.StringIO(text)))
    totals = _totals(rows)
    assert totals == {
        "calls": int(page["usage-total"]),
        "units": int(page["usage-cu"]),
        "rate_limited": int(page["usage-limited"]),
    }
    by_method = {r["method"]: r for r in rows if r["method"] != "*"}
    assert by_method["eth_chainId"]["calls"] == "9" and by_method["eth_getLogs"]["units"] == "3"

    resp = await user.client.get(f"/dashboard/usage/export?key={key_id}&window=30d&format=json")
    doc = await resp.json()
    assert doc["columns"][0] == "day" and _totals(doc["rows"]) == totals

    code, out, err = await asyncio.to_thread(cli, "usage", key_id, "--since", "30d", "--csv")
    assert code == 0, err
    assert _totals(list(csv.DictReader(io.StringIO(out)))) == totals


async def test_another_accounts_key_is_not_exported(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    owner = User(await aiohttp_client(client.server), new_email())
    await owner.signup()
    _, key_id = await owner.create_key()
    other = User(await aiohttp_client(client.server), new_email())
    await other.signup()
    resp = await other.client.get(f"/dashboard/usage/export?key={key_id}&format=csv")
    assert resp.status == 404
