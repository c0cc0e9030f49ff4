"""The answer cache through the real app: what it merges, and the memory it holds.

Real app, real Redis, real mock nodes on real ports. A cache hit never
reaches the node, so the node's call count tells a hit from a miss.
"""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mocknode import MockNode
from tests.helpers.config import MakeConfig

Client = TestClient[web.Request, web.Application]
Session = aiohttp.ClientSession
JSON = {"Content-Type": "application/json"}
ROOMY = {"free": {"rate": 1_000_000, "burst": 1_000_000}}


async def _app(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], raw: dict[str, Any] | None = None
) -> Client:
    cfg = make_config({"plans": ROOMY, "upstream": {"probe_interval_s": 60}, **(raw or {})})
    client: Client = await aiohttp_client(TestServer(create_app(cfg)))
    for pool in client.app[T.POOLS].values():
        await pool.probe_once()  # heads known: head-keyed answers are cached
    return client


async def _call(client: Client, key: str, method: str, params: Any, id_: Any = 1) -> Any:
    body = orjson.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
    resp = await client.post(f"/bsc/{key}", data=body, headers=JSON)
    assert resp.status == 200, await resp.text()
    return orjson.loads(await resp.read())


async def test_a_0X_prefix_is_not_answered_from_the_0x_entry(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    mock_nodes: dict[str, MockNode],
    api_key: str,
) -> None:
    client = await _app(make_config, aiohttp_client)
    node = mock_nodes["bsc"]
    digits = "f39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    asked = node.by_method["eth_getBalance"]
    first = await _call(client, api_key, "eth_getBalance", ["0x" + digits, "latest"])
    assert "result" in first and node.by_method["eth_getBalance"] == asked + 1
    # the digits' case is the same request: a hit, the node is not asked
    again = await _call(client, api_key, "eth_getBalance", ["0x" + digits.upper(), "latest"], 2)
    assert again["result"] == first["result"] and node.by_method["eth_getBalance"] == asked + 1
    # a 0X prefix is a request the node judges itself (many refuse it): asked again
    await _call(client, api_key, "eth_getBalance", ["0X" + digits, "latest"], 3)
    assert node.by_method["eth_getBalance"] == asked + 2
    # and two member orders of keys a Go node folds alike are two requests
    asked = node.by_method["eth_call"]
    await _call(client, api_key, "eth_call", [{"to": "0x" + digits, "To": "0x" + "00" * 20}])
    await _call(client, api_key, "eth_call", [{"To": "0x" + "00" * 20, "to": "0x" + digits}])
    assert node.by_method["eth_call"] == asked + 2


# -- the byte bound is the memory the cache holds ----------------------------------------
CACHE_BYTES = 2 * 1024 * 1024  # per network


async def _fill_tiny(client: Session, key: str, prefix: str, count: int) -> None:
    """``count`` distinct eth_getBalance reads (a 19-byte answer each), in batches of 100."""
    for start in range(0, count, 100):
        batch = [
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "eth_getBalance",
                "params": [f"0x{i:040x}", "latest"],
            }
            for i in range(start, min(count, start + 100))
        ]
        async with client.post(f"/{prefix}/{key}", data=orjson.dumps(batch), headers=JSON) as resp:
            answers = orjson.loads(await resp.read())
        assert resp.status == 200 and all("result" in a for a in answers), answers[:2]


async def _fill_large(client: Session, key: str, prefix: str, count: int) -> None:
    """``count`` distinct eth_call reads, one call per request (a 40 KB answer each)."""
    for i in range(count):
        call = {"to": "0x" + "11" * 20, "data": hex(i)}
        body = {"jsonrpc": "2.0", "id": i, "method": "eth_call", "params": [call, "latest"]}
        async with client.post(f"/{prefix}/{key}", data=orjson.dumps(body), headers=JSON) as resp:
            assert resp.status == 200 and "result" in orjson.loads(await resp.read())


@pytest.mark.slow
@pytest.mark.parametrize("answers", ["tiny", "large"])
async def test_a_full_cache_holds_no_more_memory_than_its_bound(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    mock_nodes: dict[str, MockNode],
    api_key: str,
    answers: str,
) -> None:
    """Both networks' caches filled past their bound: the memory held stays within 1.25x.

    tracemalloc counts what Python allocates, so the figure does not depend on
    the machine's load or the allocator's arenas. It starts after the app's
    first answers, so the baseline (imports, connections) is left out; what
    is left in beside the caches is a few hundred requests' leftovers.
    """
    for node in mock_nodes.values():
        node.options = dataclasses.replace(node.options, result_bytes=40_000)
    client = await _app(
        make_config,
        aiohttp_client,
        {"cache": {"max_bytes": CACHE_BYTES}, "limits": {"max_batch": 100}},
    )
    prefixes = {"bsc": "bsc", "opbnb": "opbnb"}
    fill = _fill_tiny if answers == "tiny" else _fill_large
    # A session of our own: the test client keeps every response it made.
    async with aiohttp.ClientSession(base_url=client.make_url("/")) as session:
        for prefix in prefixes.values():  # warm: first-call allocations belong to the baseline
            await fill(session, api_key, prefix, 2)
        gc.collect()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            for prefix in prefixes.values():
                # tiny: 300-500 B an entry counted, 8,000 overfill 2 MiB; large: ~40 KB, 70 do
                await fill(session, api_key, prefix, 8_000 if answers == "tiny" else 70)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
    caches = [client.app[T.POOLS][name].intel.cache for name in prefixes]
    for cache in caches:
        assert cache is not None
        assert cache.bytes <= CACHE_BYTES and cache.stats.evictions > 0  # full, and bounded
        assert cache.bytes > 0.9 * CACHE_BYTES
    bound = CACHE_BYTES * len(caches) * 1.25
    assert held < bound, f"{answers}: {held / 2**20:.1f} MiB held, bound {bound / 2**20:.1f} MiB"
