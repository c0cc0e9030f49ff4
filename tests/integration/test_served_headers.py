"""Answers that say how they were served: X-Gateway-Cache and X-Gateway-Node (and the log).

The nodes are named in the node table; the headers show those names, never
a URL, and browsers may read them (CORS ``Access-Control-Expose-Headers``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from tests.helpers.config import MakeConfig
from tests.helpers.doors import both_doors, door_make_config  # noqa: F401  (both doors)
from tests.helpers.served import Served, served


@pytest.fixture
async def node() -> AsyncIterator[MockNode]:
    mock = await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0))
    yield mock
    await mock.close()


@pytest.fixture
async def gw(make_config: MakeConfig, node: MockNode) -> AsyncIterator[Served]:
    cfg = make_config(
        {
            "server": {"metrics_listen": "", "access_log": True},
            "plans": {"free": {"rate": 1_000_000, "burst": 1_000_000}},
            "networks": {"bsc": {"upstreams": [{"url": node.url, "name": "fra-1"}]}},
        }
    )
    async with served(cfg) as s:
        yield s


async def _post(url: str, body: Any) -> tuple[Any, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return await resp.json(content_type=None), dict(resp.headers)


def _call(method: str, params: list[Any], call_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call_id, "method": method, "params": params}


async def test_miss_then_hit_then_gateway(gw: Served, api_key: str, node: MockNode) -> None:
    url = f"{gw.url}/bsc/{api_key}"
    _, first = await _post(url, _call("eth_chainId", []))
    assert (first["X-Gateway-Cache"], first["X-Gateway-Node"]) == ("miss", "fra-1")
    _, again = await _post(url, _call("eth_chainId", []))
    assert (again["X-Gateway-Cache"], again["X-Gateway-Node"]) == ("hit", "cache")
    exposed = again["Access-Control-Expose-Headers"]
    assert "X-Gateway-Cache" in exposed and "X-Gateway-Node" in exposed
    # answered by the gateway itself: a refused method, a missing key, a 405
    _, refused = await _post(url, _call("admin_peers", []))
    assert (refused["X-Gateway-Cache"], refused["X-Gateway-Node"]) == ("miss", "gateway")
    _, no_key = await _post(f"{gw.url}/bsc", _call("eth_chainId", []))
    assert no_key["X-Gateway-Node"] == "gateway"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.headers["X-Gateway-Node"] == "gateway"
    # a batch of a hit and a node call
    body = [_call("eth_chainId", [], 1), _call("eth_getBalance", ["0x" + "11" * 20, "latest"], 2)]
    _, mixed = await _post(url, body)
    assert (mixed["X-Gateway-Cache"], mixed["X-Gateway-Node"]) == ("mixed", "cache,fra-1")
    for headers in (first, again, refused, mixed):
        assert node.url.split("//")[1] not in str(headers) and api_key not in str(headers)


async def test_identical_concurrent_calls_say_coalesced(
    gw: Served, api_key: str, node: MockNode
) -> None:
    node.options = dataclasses.replace(node.options, latency_ms=400)
    url = f"{gw.url}/bsc/{api_key}"
    call = _call("eth_getBalance", ["0x" + "22" * 20, "latest"])
    answers = await asyncio.gather(*(_post(url, call) for _ in range(4)))
    states = sorted(h["X-Gateway-Cache"] for _, h in answers)
    assert "coalesced" in states and states.count("miss") <= 2, states
    assert {h["X-Gateway-Node"] for _, h in answers} == {"fra-1"}


async def test_the_request_log_shows_the_same(
    gw: Served, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        await _post(f"{gw.url}/bsc/{api_key}", _call("eth_chainId", []))
        await _post(f"{gw.url}/bsc/{api_key}", _call("eth_chainId", []))
        for _ in range(100):
            lines = [r.getMessage() for r in caplog.records if "access remote=" in r.getMessage()]
            if len(lines) >= 2:
                break
            await asyncio.sleep(0.02)
    assert "cache=miss node=fra-1" in lines[0]
    assert "cache=hit node=cache" in lines[1]
