"""The Plan and Endpoints pages say what a unit is, and what the plan's rate buys in sends.

"25 requests per second" on the free plan read as 25 transactions a second; it
is 25 units, and a raw transaction weighs 8, so a dapp gets about 3 sends a
second. Both pages now say so, from the shipped weights and plans.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.helpers.config import Client
from tests.helpers.dashboard import User, new_email

AiohttpClient = Callable[..., Any]


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


async def test_plan_page_says_what_a_unit_is(client: Client, aiohttp_client: AiohttpClient) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    doc = await user.get("/dashboard/plan")
    explained = _words(doc.testid("unit-explained"))
    assert "a plain call such as eth_blockNumber or eth_getBalance is 1 unit" in explained
    assert "(eth_sendRawTransaction) is 8 units" in explained, explained
    assert "Free plan's 25 units a second are about 3 sends a second" in explained, explained
    plans = {p.attrs["data-plan"]: p for p in doc.find_all(data_testid="plan")}
    assert plans["free"].testid("plan-rate") == "25 units per second"
    means = _words(plans["free"].testid("plan-rate-means"))
    assert means == "(25 plain calls, or about 3 raw transactions at 8 units each)", means
    assert "about 37 raw transactions" in plans["payg"].testid("plan-rate-means")


async def test_endpoints_page_says_the_plans_limits_in_units(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    doc = await user.get("/dashboard/endpoints")
    limits = _words(doc.testid("endpoint-limits"))
    assert "Your Free plan allows 25 units a second (bursts up to 50)" in limits, limits
    assert "(eth_sendRawTransaction) is 8 units, so about 3 sends a second" in limits, limits
    assert "A batch holds up to" in limits and "costs the sum of its calls" in limits
