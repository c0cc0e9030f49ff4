"""Nothing is free to send: every keyed request costs
at least one compute unit, including ones the gateway answers itself."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.app import create_app
from gateway.store.accounts import Store
from tests.helpers.config import Client, MakeConfig
from tests.helpers.lease import settle

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "body,status",
    [
        (b"{not json", 200),  # -32700
        (b'{"jsonrpc":"2.0","id":1,"method":5}', 200),  # -32600
        (b'{"jsonrpc":"2.0","id":1,"method":"debug_traceTransaction"}', 200),  # -32601
        (b'{"jsonrpc":"2.0","method":"debug_traceTransaction"}', 204),  # unknown notification
        (b"[]", 200),  # empty batch
        (b"[1,2,3]", 200),  # a batch of invalid calls
        (b"[" * 100 + b"]" * 100, 200),  # nested too deep
    ],
)
async def test_requests_we_answer_ourselves_still_cost_a_unit(
    client: Client, store: Store, account: str, body: bytes, status: int
) -> None:
    key, rec = await store.create_key(account)
    for expected in (1, 2):
        resp = await client.post(f"/bsc/{key}", data=body, headers=JSON)
        assert resp.status == status
        await settle(client.app)
        usage = await store.usage(rec.id)
        assert usage.compute_units == expected
        assert usage.total >= expected


async def test_free_bodies_are_rate_limited_too(
    make_config: MakeConfig, aiohttp_client: Any, store: Store, account: str
) -> None:
    cfg = make_config({"plans": {"free": {"rate": 0.1, "burst": 3}}})
    tight: Client = await aiohttp_client(create_app(cfg))
    key, _ = await store.create_key(account)
    statuses = []
    for _ in range(5):
        resp = await tight.post(f"/bsc/{key}", data=b"garbage", headers=JSON)
        statuses.append(resp.status)
    assert statuses == [200, 200, 200, 429, 429]


async def test_redis_failures_are_logged_rate_limited(
    make_config: MakeConfig,
    aiohttp_client: Any,
    caplog: pytest.LogCaptureFixture,
    unused_tcp_port: int,
) -> None:
    cfg = make_config({"redis": {"url": f"redis://127.0.0.1:{unused_tcp_port}"}})
    client: Client = await aiohttp_client(create_app(cfg))
    call = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'
    with caplog.at_level(logging.WARNING, logger="gateway.redis"):
        for _ in range(20):
            resp = await client.post("/bsc/" + "A" * 32, data=call, headers=JSON)
            assert resp.status == 503
    lines = [r.getMessage() for r in caplog.records if "redis unavailable" in r.getMessage()]
    assert len(lines) == 1, lines  # one line per interval, not one per request
    assert "ConnectionRefusedError" in lines[0] and "A" * 32 not in lines[0]
