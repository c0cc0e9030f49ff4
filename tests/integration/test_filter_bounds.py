"""Filters are bounded in what they store, per key, and per network.

Through the real app and the real Redis: a log filter's topic alternatives
per position and its bytes are capped (-32602 naming the setting), a key's
live filters are capped in bytes (-32000 naming the setting), so 100 filters
of one key keep Redis within a few MB, measured with ``INFO memory``. A
filter method on another network's path answers as for an unknown id.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from redis.asyncio import Redis

from gateway.config import FiltersConfig
from tests.integration import test_filters as _tf
from tests.integration.test_filters import JSON, AppFactory, Client, rpc

# The filter tests' fixtures: chain mock nodes behind the real app.
chain, nodes, make_app = _tf.chain, _tf.nodes, _tf.make_app


def topics(positions: int, alternatives: int) -> list[list[str]]:
    return [["0x" + secrets.token_hex(32) for _ in range(alternatives)] for _ in range(positions)]


async def used_memory(redis: Redis) -> int:
    info: dict[str, Any] = await redis.info("memory")
    return int(info["used_memory"])


async def test_topic_alternatives_and_filter_bytes_are_capped_naming_the_limit(
    make_app: AppFactory, api_key: str
) -> None:
    client = await make_app()
    most = FiltersConfig().max_topic_alternatives
    too_many = await rpc(client, api_key, "eth_newFilter", [{"topics": topics(1, most + 1)}])
    error = too_many["error"]
    assert too_many["_status"] == 200 and error["code"] == -32602, too_many
    assert error["data"]["limit"] == "filters.max_topic_alternatives"
    assert str(most) in error["data"]["reason"]
    # at the limit in one position: fine
    ok = await rpc(client, api_key, "eth_newFilter", [{"topics": topics(1, most)}])
    assert ok["result"].startswith("0x"), ok
    # every position near the limit, and addresses: past the bytes one filter may hold
    big = {"address": ["0x" + secrets.token_hex(20) for _ in range(300)], "topics": topics(4, 200)}
    refused = await rpc(client, api_key, "eth_newFilter", [big])
    assert refused["error"]["code"] == -32602, refused
    assert refused["error"]["data"]["limit"] == "filters.max_filter_bytes"


async def test_a_hundred_filters_of_one_key_keep_redis_within_a_few_mb(
    make_app: AppFactory, api_key: str, redis: Redis
) -> None:
    """Before: one eth_newFilter kept up to ~1 MB (alternatives were unlimited); 100
    filters of one key took Redis from 1.3 to 107.5 MB."""
    client = await make_app()
    before = await used_memory(redis)
    answers = []
    for _ in range(100):  # each as large as one filter may be (about 55 KB of topics)
        answers.append(await rpc(client, api_key, "eth_newFilter", [{"topics": topics(4, 200)}]))
    for _ in range(20):  # and some far larger (about 170 KB each)
        answers.append(await rpc(client, api_key, "eth_newFilter", [{"topics": topics(4, 600)}]))
    grown = await used_memory(redis) - before
    print(f"120 eth_newFilter of one key: Redis used_memory +{grown / 2**20:.2f} MB")
    made = [a for a in answers if "result" in a]
    over_key = [a for a in answers if a.get("error", {}).get("code") == -32000]
    assert 20 <= len(made) < 100, len(made)
    assert over_key and over_key[0]["error"]["data"]["limit"] == "filters.max_key_bytes"
    assert over_key[0]["error"]["message"].startswith("too many filters: ")
    assert grown < 4 * 1024 * 1024, grown
    # room comes back when one goes
    assert (await rpc(client, api_key, "eth_uninstallFilter", [made[0]["result"]]))["result"]
    again = await rpc(client, api_key, "eth_newFilter", [{"topics": topics(4, 100)}])
    assert again["result"].startswith("0x"), again


async def call_on(client: Client, path: str, method: str, params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = await client.post(path, data=orjson.dumps(body), headers=JSON)
    answer: dict[str, Any] = orjson.loads(await resp.read())
    return answer


async def test_every_filter_method_on_another_networks_path_answers_as_for_an_unknown_id(
    make_app: AppFactory, api_key: str
) -> None:
    """Before: ``/opbnb/KEY`` eth_uninstallFilter(<the key's bsc filter>) answered true
    and the bsc filter was gone."""
    client = await make_app()
    made: list[tuple[str, list[Any]]] = [("eth_newFilter", [{}]), ("eth_newBlockFilter", [])]
    for method, params in made:
        fid = (await rpc(client, api_key, method, params))["result"]
        other = f"/opbnb/{api_key}"
        for poll in ("eth_getFilterChanges", "eth_getFilterLogs"):
            answer = await call_on(client, other, poll, [fid])
            assert answer["error"] == {"code": -32000, "message": "filter not found"}, answer
        assert (await call_on(client, other, "eth_uninstallFilter", [fid]))["result"] is False
        # still there on its own network
        assert (await rpc(client, api_key, "eth_getFilterChanges", [fid]))["result"] == []
        assert (await rpc(client, api_key, "eth_uninstallFilter", [fid]))["result"] is True
