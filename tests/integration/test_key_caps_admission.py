"""Owner's key caps enforced by the admission call: 429 -32005 naming the key's cap.

Through the real app: the caps are fields ``rcap`` and ``dcap`` of the key
record (gateway/store/keylimits.py), set with a PUBLISH on ``<prefix>:keys``;
lease.lua (and admit.lua, in ``admission.mode = "exact"``) narrows the plan
with them in the same atomic call. Every test runs in both modes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import Config
from gateway.store.accounts import Store
from gateway.store.keylimits import KeyLimits
from tests.helpers.config import Client, MakeConfig

CALL = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}


@pytest.fixture(params=["lease", "exact"])
def config(make_config: MakeConfig, request: pytest.FixtureRequest) -> Config:
    return make_config({"admission": {"mode": request.param}})


async def _calls(client: Client, key: str, n: int) -> list[tuple[int, Any]]:
    out = []
    for _ in range(n):
        resp = await client.post(f"/bsc/{key}", json=CALL)
        out.append((resp.status, await resp.json()))
    return out


async def test_rate_cap_refuses_below_the_plan(
    client: Client, store: Store, account: str, config: Config
) -> None:
    key, record = await store.create_key(account, name="capped")
    await KeyLimits(store, config.plans).set_key_limits(account, record.id, rate=1, daily_cu=None)
    # 60 calls at once: the free plan (25/s, burst 50) alone would admit 50 of them.
    # At 1/s the cap slows a few of them (limits.max_wait_s) and refuses the rest.
    answers = await asyncio.gather(*(_calls(client, key, 1) for _ in range(60)))
    refused = [body for [(status, body)] in answers if status == 429]
    assert len(refused) >= 10
    error = refused[0]["error"]
    assert error["code"] == -32005
    reason = error["data"]["reason"].lower()
    assert "key" in reason and "plan" not in reason


async def test_daily_cap_refuses_then_clearing_it_admits_again(
    client: Client, store: Store, account: str, config: Config
) -> None:
    key, record = await store.create_key(account, name="daily")
    limits = KeyLimits(store, config.plans)
    await limits.set_key_limits(account, record.id, rate=None, daily_cu=3)
    answers = await _calls(client, key, 5)
    assert [status for status, _ in answers] == [200, 200, 200, 429, 429]
    reason = answers[3][1]["error"]["data"]["reason"].lower()
    assert "key" in reason and "daily" in reason
    await limits.set_key_limits(account, record.id, rate=None, daily_cu=None)
    # Cached records are dropped on the PUBLISH: admitted again well within 1 s.
    for _ in range(20):
        if (await _calls(client, key, 1))[0][0] == 200:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("still refused 1 s after the cap was cleared")
