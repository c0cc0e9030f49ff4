"""The transaction tests' app: two mock nodes of chain 56 (each its own mempool, as
separate nodes are), two mock builders that record what they got, the real Redis and the
real app; ``rpc`` sends one call, ``sent`` reads what each node got from its own counters."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from gateway.demo.mocknode import MockNode, MockNodeOptions, start_mock_node
from tests.helpers.config import MakeConfig
from tests.helpers.waiting import eventually

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
ROOMY = {"rate": 10_000, "burst": 10_000}
SEND = "eth_sendRawTransaction"


@pytest.fixture
async def nodes() -> AsyncIterator[list[MockNode]]:
    started = [
        await start_mock_node(MockNodeOptions(chain_id=56, block_time_s=0)) for _ in range(2)
    ]
    yield started
    for node in started:
        await node.close()


@pytest.fixture
async def builders() -> AsyncIterator[list[MockBuilder]]:
    started = [await start_mock_builder(56) for _ in range(2)]
    yield started
    for builder in started:
        await builder.close()


AppFactory = Callable[..., Any]


@pytest.fixture
def make_app(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    nodes: list[MockNode],
    builders: list[MockBuilder],
) -> AppFactory:
    async def make(
        bsc: dict[str, Any] | None = None,
        plan: dict[str, Any] | None = None,
        raw: dict[str, Any] | None = None,
    ) -> Client:
        net = {"private_tx": [b.url for b in builders], **(bsc or {})}
        cfg = make_config(
            {"plans": {"free": {**ROOMY, **(plan or {})}}, "networks": {"bsc": net}, **(raw or {})},
            upstreams={"bsc": [n.url for n in nodes]},
        )
        client: Client = await aiohttp_client(TestServer(create_app(cfg)))
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: len(pool.in_service()) == len(nodes), 15)
        return client

    return make


async def rpc(
    client: Client, key: str, method: str, params: Any
) -> tuple[int, dict[str, Any], Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    resp = await client.post(f"/bsc/{key}", data=orjson.dumps(body), headers=JSON)
    answer: dict[str, Any] = orjson.loads(await resp.read())
    return resp.status, answer, resp.headers


def sent(nodes: list[MockNode], method: str = SEND) -> list[int]:
    return [n.by_method[method] for n in nodes]
