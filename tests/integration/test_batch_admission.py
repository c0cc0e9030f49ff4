"""A batch is admitted call by call, in both admission modes.

The calls the bucket holds units for go through; the rest take their places
as -32005 with ``error.data.reason`` (HTTP 200 when any call went through,
429 when none did). A call that costs more than the plan's burst can never
pass: its refusal says so, with no ``Retry-After``. Still one Redis round
trip per request: ``admit.lua`` (exact) and ``lease.lua`` (leased) walk the
calls in the same script call. The plan's rate is tiny, so the bucket does
not refill during a test: every count below is exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.config import Config
from gateway.store.accounts import Store
from tests.helpers.config import Client, MakeConfig
from tests.helpers.evmstack import JS, hardhat_ready
from tests.helpers.lease import settle

# eth_blockNumber 3 units, eth_getProof 20 (more than the burst of 10), the rest 1
PLAN = {
    "free": {
        "rate": 0.001,
        "burst": 10,
        "weights": {"eth_blockNumber": 3, "eth_getProof": 20},
    }
}


@pytest.fixture(params=["lease", "exact"])
def config(make_config: MakeConfig, request: pytest.FixtureRequest) -> Config:
    return make_config({"admission": {"mode": request.param}, "plans": PLAN})


def call(i: int, method: str = "eth_blockNumber", params: list[Any] | None = None) -> Any:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params or []}


PROOF = ["0x" + "11" * 20, [], "latest"]


def remaining(headers: Any) -> int:
    fields = dict(p.strip().split("=") for p in headers["RateLimit"].split(","))
    return int(fields["remaining"])


async def test_the_calls_that_fit_go_through_and_the_rest_are_refused_in_place(
    client: Client, api_key: str
) -> None:
    """Before: the whole batch (15 units, bucket 10) answered 429."""
    batch = [call(i) for i in range(5)]  # 5 x 3 units: three fit
    resp = await client.post(f"/bsc/{api_key}", json=batch)
    body = await resp.json()
    assert resp.status == 200, body
    assert "Retry-After" not in resp.headers
    assert [a["id"] for a in body] == [0, 1, 2, 3, 4]
    assert all("result" in a for a in body[:3]), body
    for refused in body[3:]:
        error = refused["error"]
        assert error["code"] == -32005 and error["data"]["reason"]
        assert error["message"] == f"Rate limit exceeded: {error['data']['reason']}"
        assert error["data"]["retry_after_ms"] >= 1
    # 1 unit left: the headers say so, and a 3-unit call is refused as they say
    assert remaining(resp.headers) == 1
    resp = await client.post(f"/bsc/{api_key}", json=[call(7), call(8)])
    body = await resp.json()
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    assert [a["error"]["code"] for a in body] == [-32005, -32005]
    assert [a["id"] for a in body] == [7, 8]
    assert remaining(resp.headers) < 3
    # in order: a 1-unit call first still fits the last unit; the first call the
    # bucket cannot hold stops the walk, so a cheap call after it waits its turn too
    batch = [call(9, "eth_chainId"), call(10), call(11, "eth_chainId")]
    resp = await client.post(f"/bsc/{api_key}", json=batch)
    body = await resp.json()
    assert resp.status == 200, body
    assert body[0]["result"] == "0x38"
    assert body[1]["error"]["code"] == body[2]["error"]["code"] == -32005
    assert remaining(resp.headers) == 0


async def test_a_call_that_can_never_fit_says_so_without_retry_after(
    client: Client, api_key: str
) -> None:
    """Before: 429 with Retry-After: 1 for a call no bucket of this plan can ever hold."""
    resp = await client.post(f"/bsc/{api_key}", json=call(1, "eth_getProof", PROOF))
    body = await resp.json()
    assert resp.status == 429 and "Retry-After" not in resp.headers
    data = body["error"]["data"]
    assert "never" in data["reason"] and "retry_after_ms" not in data
    assert body["id"] == 1
    # in a batch it takes its place; the calls that fit go through, and are charged
    batch = [call(2, "eth_getProof", PROOF), call(3, "eth_chainId"), call(4)]
    resp = await client.post(f"/bsc/{api_key}", json=batch)
    body = await resp.json()
    assert resp.status == 200 and "Retry-After" not in resp.headers, body
    assert "never" in body[0]["error"]["data"]["reason"]
    assert "retry_after_ms" not in body[0]["error"]["data"]
    assert body[1]["result"] == "0x38" and "result" in body[2]
    assert remaining(resp.headers) == 10 - 1 - 3
    # a batch of nothing but such calls: 429, still without Retry-After
    resp = await client.post(f"/bsc/{api_key}", json=[call(5, "eth_getProof", PROOF)] * 2)
    assert resp.status == 429 and "Retry-After" not in resp.headers


async def test_invalid_calls_and_notifications_keep_their_places(
    client: Client, api_key: str
) -> None:
    batch = [
        call(0),
        {"jsonrpc": "2.0", "id": 1, "method": "admin_peers", "params": []},
        call(2),
        {"jsonrpc": "2.0", "method": "eth_blockNumber", "params": []},  # a notification
        call(4),
        call(5),
    ]
    resp = await client.post(f"/bsc/{api_key}", json=batch)
    body = await resp.json()
    assert resp.status == 200, body
    by_id = {a["id"]: a for a in body}
    assert sorted(by_id) == [0, 1, 2, 4, 5]  # the notification gets no entry
    assert "result" in by_id[0] and "result" in by_id[2]
    assert by_id[1]["error"]["code"] == -32601
    # 0 and 2 took 6 units, the notification 3: the 10-unit bucket has 1 left
    assert by_id[4]["error"]["code"] == by_id[5]["error"]["code"] == -32005


async def test_usage_counts_the_admitted_calls_and_their_units_only(
    client: Client, store: Store, account: str
) -> None:
    key, rec = await store.create_key(account)
    batch = [call(0), call(1, "eth_chainId"), call(2), call(3), call(4, "eth_chainId")]
    resp = await client.post(f"/bsc/{key}", json=batch)  # 3 + 1 + 3 + 3 fit, the last not
    assert resp.status == 200
    await settle(client.app)
    usage = await store.usage(rec.id)
    assert usage.compute_units == 10
    assert usage.methods == {"eth_blockNumber": 3, "eth_chainId": 1}
    assert usage.limited == 1 and usage.total == 4


@pytest.mark.skipif(not hardhat_ready(), reason="npm install --prefix tests/js has not run")
async def test_ethers_query_filter_works_on_the_free_plan(
    make_config: MakeConfig, aiohttp_client: Any, api_key: str
) -> None:
    """Before: ethers' first batch (eth_chainId + eth_getLogs, 51 units) could never
    fit the free plan's burst of 50 and was answered 429 with Retry-After: 1."""
    app_client: Client = await aiohttp_client(create_app(make_config()))  # the shipped plans
    url = str(app_client.make_url(f"/bsc/{api_key}"))
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "query_filter.mjs"),
        url,
        "0x" + "42" * 20,
        "8",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    result = orjson.loads(out.splitlines()[-1])
    assert result == {"ok": True, "logs": [0] * 8}, result


async def test_a_websocket_batch_is_admitted_call_by_call_too(client: Client, api_key: str) -> None:
    async with client.ws_connect(f"/bsc/{api_key}") as ws:
        await ws.send_str(orjson.dumps([call(i) for i in range(5)]).decode())
        body = orjson.loads((await ws.receive()).data)
    assert [a["id"] for a in body] == [0, 1, 2, 3, 4]
    assert all("result" in a for a in body[:3]), body
    assert all(a["error"]["code"] == -32005 for a in body[3:]), body
    assert all(a["error"]["data"]["reason"] for a in body[3:])
