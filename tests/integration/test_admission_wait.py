"""A call over the plan's rate that the bucket will soon hold waits instead of failing.

On the shipped free plan (25 units/s, burst 50), in both admission modes: a
burst a little over the burst is slowed, not refused, whether sent as single
calls or as one batch; the slowing matches the bucket (no call passes before
the bucket holds it), and no call waits longer than ``limits.max_wait_s``. A
plan with ``max_wait_s = 0`` is refused at once as before, and past
``limits.max_waiting`` waiting calls of one key a call is refused at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import Config
from gateway.store.accounts import Store
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import Client, MakeConfig
from tests.helpers.lease import settle

RATE, BURST = 25, 50  # the shipped free plan
MAX_WAIT_S = 1.0  # the shipped limits.max_wait_s
SLACK_S = 0.5  # a loaded test box: the event loop and Redis may lag this much


@pytest.fixture(params=["lease", "exact"])
def config(make_config: MakeConfig, request: pytest.FixtureRequest) -> Config:
    return make_config({"admission": {"mode": request.param}})


def call(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "eth_chainId", "params": []}


async def timed_post(client: Client, url: str, body: Any) -> tuple[int, Any, float]:
    start = time.monotonic()
    resp = await client.post(url, json=body)
    answer = await resp.json()
    return resp.status, answer, time.monotonic() - start


def waited(client: Client) -> float:
    """How many waits ``gateway_admission_wait_seconds`` has counted."""
    for metric in client.app[METRICS].admission_wait.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                return sample.value
    return 0.0


async def test_a_burst_of_single_calls_over_the_burst_is_slowed_not_refused(
    client: Client, api_key: str
) -> None:
    n = BURST + 10
    start = time.monotonic()
    answers = await asyncio.gather(
        *(timed_post(client, f"/bsc/{api_key}", call(i)) for i in range(n))
    )
    elapsed = time.monotonic() - start
    failed = [a for status, a, _ in answers if status != 200 or "error" in a]
    assert not failed, failed[:3]
    # the ten past the burst needed the bucket to refill: 10 / 25 per second
    assert elapsed >= (n - BURST) / RATE * 0.9, elapsed
    assert max(t for _, _, t in answers) < MAX_WAIT_S + SLACK_S
    assert waited(client) >= 1


async def test_a_batch_over_the_burst_waits_for_its_refused_calls(
    client: Client, api_key: str
) -> None:
    n = BURST + 10
    status, answer, elapsed = await timed_post(
        client, f"/bsc/{api_key}", [call(i) for i in range(n)]
    )
    assert status == 200
    assert [a["id"] for a in answer] == list(range(n))
    assert all("result" in a for a in answer), [a for a in answer if "error" in a][:3]
    assert (n - BURST) / RATE * 0.9 <= elapsed < MAX_WAIT_S + SLACK_S
    # back to back at once: each call waits its turn, the pace is the plan's rate
    start = time.monotonic()
    for i in range(20):
        status, answer, _ = await timed_post(client, f"/bsc/{api_key}", call(i))
        assert status == 200 and "result" in answer, answer
    assert time.monotonic() - start >= 20 / RATE * 0.9


async def test_a_call_that_waited_counts_as_rate_limited_once(
    client: Client, store: Store, account: str
) -> None:
    """Its first refusal counts (it was slowed by the plan); the asks after a wait do
    not count again, however many it took (ten calls waiting in one batch are asked
    about up to ten times)."""
    key, rec = await store.create_key(account)
    n = BURST + 10
    status, answer, _ = await timed_post(client, f"/bsc/{key}", [call(i) for i in range(n)])
    assert status == 200 and all("result" in a for a in answer)
    await settle(client.app)
    usage = await store.usage(rec.id)
    assert usage.limited == n - BURST
    assert usage.methods == {"eth_chainId": n}


async def test_more_than_the_wait_allows_is_still_refused(client: Client, api_key: str) -> None:
    """A batch needing 2 s of refill waits for what 1 s brings, then refuses the rest."""
    n = BURST + 2 * RATE
    status, answer, elapsed = await timed_post(
        client, f"/bsc/{api_key}", [call(i) for i in range(n)]
    )
    assert status == 200
    refused = [a for a in answer if "error" in a]
    assert refused and all(a["error"]["code"] == -32005 for a in refused)
    assert all(a["error"]["data"]["retry_after_ms"] >= 1 for a in refused)
    assert len(refused) <= n - BURST - RATE * MAX_WAIT_S * 0.5
    assert elapsed < MAX_WAIT_S + SLACK_S


@pytest.mark.parametrize("mode", ["lease", "exact"])
async def test_a_plan_with_max_wait_0_is_refused_at_once(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, mode: str
) -> None:
    cfg = make_config({"admission": {"mode": mode}, "plans": {"free": {"max_wait_s": 0}}})
    assert cfg.max_wait_s("free") == 0
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    status, answer, elapsed = await timed_post(
        client, f"/bsc/{api_key}", [call(i) for i in range(BURST + 10)]
    )
    assert status == 200
    assert sum("error" in a for a in answer) >= 9
    assert elapsed < 0.4  # refilling for the ten would take 0.4 s
    assert waited(client) == 0


@pytest.mark.parametrize("mode", ["lease", "exact"])
async def test_past_max_waiting_a_call_is_refused_at_once(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str, mode: str
) -> None:
    cfg = make_config({"admission": {"mode": mode}, "limits": {"max_waiting": 4}})
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    status, answer, _ = await timed_post(client, f"/bsc/{api_key}", [call(i) for i in range(BURST)])
    assert status == 200 and all("result" in a for a in answer)
    # 12 at once on an empty bucket: 4 may wait; the rest are refused now
    answers = await asyncio.gather(
        *(timed_post(client, f"/bsc/{api_key}", call(i)) for i in range(12))
    )
    refused = [t for status, a, t in answers if status == 429]
    assert len(refused) >= 4, answers
    assert min(refused) < 0.3


@pytest.mark.parametrize("mode", ["lease", "exact"])
async def test_waiting_calls_hold_no_in_flight_slot(
    make_config: MakeConfig, aiohttp_client: Any, store: Store, account: str, mode: str
) -> None:
    """Eight calls of one key wait for its bucket (2/s) while the process has only
    eight in-flight slots (``limits.max_in_flight``, the knob this is about): another
    key's call is answered at once, not after the waits (it queued behind them
    while waiting calls kept their slots)."""
    cfg = make_config(
        {
            "admission": {"mode": mode},
            "limits": {"max_in_flight": 8},
            "plans": {"free": {"rate": 2, "burst": 2}},
        }
    )
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    busy, _ = await store.create_key(account, name="busy")
    other, _ = await store.create_key(account, name="other")
    for i in range(2):  # the busy key's bucket, spent
        assert (await timed_post(client, f"/bsc/{busy}", call(i)))[0] == 200
    waiting = [asyncio.create_task(timed_post(client, f"/bsc/{busy}", call(i))) for i in range(8)]
    await asyncio.sleep(0.1)  # all eight admitted to the pipeline and waiting
    assert not any(t.done() for t in waiting)
    status, answer, elapsed = await timed_post(client, f"/bsc/{other}", call(99))
    assert status == 200 and "result" in answer, answer
    assert elapsed < 0.3, elapsed  # the waits last about half a second and more
    assert not all(t.done() for t in waiting)
    results = await asyncio.gather(*waiting)
    assert all(s in (200, 429) for s, _, _ in results)
