"""A call the gateway refuses by its own guard costs the minimum unit.

One ``eth_getLogs`` over the plan's range limit used to be charged its
weight (50) although no node saw it: a free key's burst drained by refusals.
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.lease import settle
from tests.helpers.served import served

WIDE = b'{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0"}]}'
CHAIN_ID = b'{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}'


async def _send(http: aiohttp.ClientSession, url: str, body: bytes, ws: bool) -> bytes:
    if not ws:
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            return await r.read()
    async with http.ws_connect("ws" + url[4:]) as sock:
        await sock.send_bytes(body)
        data = (await sock.receive(timeout=5)).data
        return data.encode() if isinstance(data, str) else bytes(data)


@pytest.mark.parametrize("ws", [False, True], ids=["http", "ws"])
@pytest.mark.parametrize("plan_limits", [False, True], ids=["one-limit", "per-plan-limits"])
async def test_a_guard_refusal_costs_one_unit(
    make_config: MakeConfig, store: Store, account: str, ws: bool, plan_limits: bool
) -> None:
    raw: dict[str, object] = {}
    if plan_limits:  # the limit depends on the plan: known once the key was seen
        raw = {"plans": {"free": {"max_logs_range": 100}, "payg": {"max_logs_range": 50_000}}}
    cfg = make_config(raw)
    assert cfg.plan("free").cost("eth_getLogs") > 1
    key, rec = await store.create_key(account)
    async with served(cfg) as srv, aiohttp.ClientSession() as http:
        url = f"{srv.url}/bsc/{key}"
        assert b'"result"' in await _send(http, url, CHAIN_ID, ws)  # 1 unit
        for _ in range(3):
            answer = orjson.loads(await _send(http, url, WIDE, ws))
            assert answer["error"]["code"] == -32602
        await settle(srv.app)
        usage = await store.usage(rec.id)
    assert usage.compute_units == 4  # 1 + three refusals at 1 each (not 3 x 50)
