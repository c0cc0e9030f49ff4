"""A WebSocket upgrade is admitted by the pipeline, so it is refused as an HTTP POST is.

Through the real app (``GatewayRunner``, real Redis, real ports): a key over
its limit gets the same 429 on the upgrade as on a POST (body, ``Retry-After``,
RateLimit headers, ``error.data.reason``), a Redis that cannot answer counts
in ``gateway_redis_errors`` for an upgrade as for a POST, and the per-key
socket cap's 429 says why with a reason and the key's RateLimit headers. A
node's bad answer is delivered (``rpc.delivery``) and logged the same way on
a socket as over HTTP.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDictProxy

from gateway.demo.mocknode import start_mock_node
from gateway.demo.nodeoptions import MockNodeOptions
from gateway.redis.embedded import free_port
from gateway.store.accounts import Store
from gateway.store.keylimits import KeyLimits
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import MakeConfig
from tests.helpers.served import served

CALL: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "method": "eth_blockNumber", "params": []}
READ: dict[str, Any] = {  # a read only a node answers (no cache in that test)
    "jsonrpc": "2.0",
    "id": 5,
    "method": "eth_getBalance",
    "params": ["0x" + "00" * 20, "latest"],
}
UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
# What a refusal says beside its body; Date and Content-Length aside, both must match.
SAID = (
    "Content-Type",
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "Access-Control-Allow-Origin",
    "Access-Control-Expose-Headers",
    "X-Gateway-Cache",
    "X-Gateway-Node",
)


async def _post(
    http: aiohttp.ClientSession, url: str, call: dict[str, Any] = CALL
) -> tuple[int, Any, dict[str, str]]:
    async with http.post(url, json=call) as resp:
        return resp.status, orjson.loads(await resp.read()), _said(resp.headers)


async def _upgrade(http: aiohttp.ClientSession, url: str) -> tuple[int, Any, dict[str, str]]:
    async with http.get(url, headers=UPGRADE) as resp:
        return resp.status, orjson.loads(await resp.read()), _said(resp.headers)


def _said(headers: CIMultiDictProxy[str]) -> dict[str, str]:
    return {name: headers[name] for name in SAID if name in headers}


def _redis_errors(app: Any, policy: str) -> float:
    value: float = app[METRICS].redis_errors.labels(policy)._value.get()
    return value


async def test_an_upgrade_over_the_limit_answers_like_a_post_over_the_limit(
    make_config: MakeConfig, store: Store, account: str, http: aiohttp.ClientSession
) -> None:
    # Exact admission: an upgrade costs no units, so only a daily cap already
    # spent past (lowered below today's use) refuses it, as it refuses a POST.
    cfg = make_config({"admission": {"mode": "exact"}})
    key, record = await store.create_key(account, name="capped")
    async with served(cfg) as srv:
        url = f"{srv.url}/bsc/{key}"
        for _ in range(3):
            assert (await _post(http, url))[0] == 200
        await KeyLimits(store, cfg.plans).set_key_limits(account, record.id, rate=None, daily_cu=1)
        post = await _post(http, url)
        upgrade = await _upgrade(http, url)
    assert post[0] == upgrade[0] == 429, (post, upgrade)
    (_, post_body, post_said), (_, up_body, up_said) = post, upgrade
    assert "daily" in up_body["error"]["data"]["reason"]
    # retry_after_ms counts down between the two answers; all else is the same
    post_wait = post_body["error"]["data"].pop("retry_after_ms")
    up_wait = up_body["error"]["data"].pop("retry_after_ms")
    assert 0 <= post_wait - up_wait < 5_000, (post_wait, up_wait)
    assert up_body == post_body
    assert {"Retry-After", "RateLimit", "RateLimit-Policy"} <= set(up_said)
    assert abs(int(post_said.pop("Retry-After")) - int(up_said.pop("Retry-After"))) <= 5
    assert up_said == post_said


async def test_redis_away_counts_an_upgrade_as_it_counts_a_post(
    make_config: MakeConfig, api_key: str, http: aiohttp.ClientSession
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with served(make_config({"redis": {"url": dead, "fail_open": False}})) as srv:
        url = f"{srv.url}/bsc/{api_key}"
        post = await _post(http, url)
        assert _redis_errors(srv.app, "closed") == 1
        upgrade = await _upgrade(http, url)
        assert _redis_errors(srv.app, "closed") == 2
    assert post == upgrade
    assert post[0] == 503 and post[1]["error"]["message"] == "Service unavailable"


async def test_redis_away_fail_open_counts_the_upgrade_and_its_lease(
    make_config: MakeConfig, api_key: str, http: aiohttp.ClientSession
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with served(make_config({"redis": {"url": dead, "fail_open": True}})) as srv:
        async with http.ws_connect(f"{srv.url}/bsc/{api_key}") as ws:
            assert not ws.closed
        # the upgrade's admission and its socket lease: two round trips, both let through
        assert _redis_errors(srv.app, "open") == 2
        assert _redis_errors(srv.app, "closed") == 0


async def test_the_socket_cap_refusal_gives_its_reason_and_the_keys_limits(
    make_config: MakeConfig, api_key: str, http: aiohttp.ClientSession
) -> None:
    cfg = make_config({"plans": {"free": {"ws_max_sockets": 1}}})
    async with served(cfg) as srv:
        url = f"{srv.url}/bsc/{api_key}"
        async with http.ws_connect(url):
            status, body, said = await _upgrade(http, url)
    assert status == 429
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32005,
            "message": "Rate limit exceeded: at most 1 open sockets per key",
            "data": {"reason": "at most 1 open sockets per key"},
        },
    }
    assert "Retry-After" not in said  # only a close makes room: no wait would do
    assert {"RateLimit", "RateLimit-Policy", "Access-Control-Expose-Headers"} <= set(said)


async def test_a_bad_node_answer_is_answered_and_logged_on_a_socket_as_over_http(
    make_config: MakeConfig,
    api_key: str,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # another call's id: small (read whole), and over the stream bound in a layout
    # read whole (refused before the first piece), each on its own network
    small = b'{"jsonrpc":"2.0","id":999999,"result":"0x1"}'
    big = b'{"extra":1,"jsonrpc":"2.0","id":999999,"result":"0x' + b"ab" * 600_000 + b'"}'
    liars = [
        await start_mock_node(MockNodeOptions(chain, raw_answer=raw, spare_probes=True))
        for chain, raw in ((56, small), (204, big))
    ]
    caplog.set_level(logging.WARNING, "gateway.rpc")
    cfg = make_config(
        {"cache": {"enabled": False}},
        upstreams={"bsc": [liars[0].url], "opbnb": [liars[1].url]},
    )
    try:
        async with served(cfg) as srv:
            for net in ("bsc", "opbnb"):
                url = f"{srv.url}/{net}/{api_key}"
                over_http = (await _post(http, url, READ))[1]
                async with http.ws_connect(url, max_msg_size=0) as ws:
                    await ws.send_bytes(orjson.dumps(READ))
                    over_ws = orjson.loads((await ws.receive()).data)
                assert over_ws == over_http, net
                assert over_ws["error"] == {"code": -32603, "message": "Upstream unavailable"}
    finally:
        for node in liars:
            await node.close()
    lines = [r.getMessage() for r in caplog.records if "bad node answer" in r.getMessage()]
    # each network's answer, once over HTTP and once on the socket
    assert sorted(line.split()[3] for line in lines) == ["network=bsc"] * 2 + ["network=opbnb"] * 2
    assert not any(api_key in line for line in lines)
