"""Every private transaction followed from send to receipt, on a real EVM (Hardhat).

Hardhat is the network's public node; mock builders take the private
route, and the one that includes what it accepts forwards it to Hardhat
(which mines it in its next block), as a builder's block would land. The
gateway follows each accepted transaction until included, replaced or
given up: the key's Transactions log and the metrics say which. Real
signed transactions (eth-account) from accounts funded on the node. A
builder with a status method is asked too: its own record ("included",
"dropped") settles a transaction before the chain has a receipt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from gateway.redis import keyspace as ks
from gateway.rpc.auth import key_hash
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import MakeConfig
from tests.helpers.evmstack import hardhat_node, hardhat_ready
from tests.helpers.evmstack import rpc as node_rpc
from tests.helpers.txapp import SEND, Client, rpc
from tests.helpers.txs import sender_account, signed, tx_hash
from tests.helpers.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hardhat_ready(), reason="npm install --prefix tests/js has not run"),
]
SEEDS = range(600, 610)


@pytest.fixture
async def node() -> AsyncIterator[str]:
    async with hardhat_node(56) as url:
        rich = (await node_rpc(url, "eth_accounts", []))[0]
        for seed in SEEDS:
            to = sender_account(seed).address
            await node_rpc(
                url, "eth_sendTransaction", [{"from": rich, "to": to, "value": hex(10**19)}]
            )
        yield url


@pytest.fixture
async def builders(node: str) -> AsyncIterator[dict[str, MockBuilder]]:
    async def land(raw: str) -> None:
        await node_rpc(node, "eth_sendRawTransaction", [raw])

    started = {
        "lands": await start_mock_builder(56, land),  # includes what it takes
        "holds": await start_mock_builder(56),  # takes, and never includes
    }
    yield started
    for builder in started.values():
        await builder.close()


AppOf = Callable[..., Any]


@pytest.fixture
def app_of(make_config: MakeConfig, aiohttp_client: Callable[..., Any], node: str) -> AppOf:
    async def make(
        *names: str, builders: dict[str, MockBuilder], status: dict[str, bool] | None = None
    ) -> Client:
        """The app with ``names`` as its builders; ``status``: name -> batched, for those
        asked through their status method."""
        entries: list[dict[str, Any]] = [{"url": builders[n].url, "name": n} for n in names]
        for entry in entries:
            if status is not None and entry["name"] in status:
                entry["status_method"] = builders[entry["name"]].status_method
                entry["status_batch"] = status[entry["name"]]
        cfg = make_config(
            {
                "plans": {"free": {"rate": 10_000, "burst": 10_000, "private_tx": "on"}},
                "networks": {"bsc": {"private_tx": entries}},
                # Hardhat's chain starts at block 0 beside the mock opBNB node's: the
                # lag check is not what this is about
                "upstream": {"max_lag_blocks": 10_000},
            },
            upstreams={"bsc": [node]},
        )
        client: Client = await aiohttp_client(TestServer(create_app(cfg)))
        pool = client.app[T.POOLS]["bsc"]
        await eventually(lambda: len(pool.in_service()) == 1, 15)
        return client

    return make


async def outcomes(redis: Redis, prefix: str, key: str, tx: str) -> list[str]:
    rows: Any = await redis.xrange(ks.tx_log(prefix, key_hash(key)))
    return [e["outcome"] for _id, e in rows if e["hash"] == tx]


def counted(client: Client, builder: str, outcome: str) -> float:
    value = client.app[METRICS].registry.get_sample_value(
        "gateway_private_tx_total", {"network": "bsc", "builder": builder, "outcome": outcome}
    )
    return value or 0.0


async def test_included_with_its_block_and_the_time_it_took(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    client = await app_of("lands", builders=builders)
    raw = signed(sender_account(600))
    started = time.monotonic()
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    receipt = await node_rpc(node, "eth_getTransactionReceipt", [tx_hash(raw)])
    block = int(receipt["blockNumber"], 16)

    async def included() -> bool:
        return f"included in block {block}" in await outcomes(redis, prefix, api_key, tx_hash(raw))

    await eventually(included, 15, "the inclusion on the key's log")
    took = time.monotonic() - started
    assert counted(client, "lands", "included") == 1
    registry = client.app[METRICS].registry
    count = registry.get_sample_value(
        "gateway_private_tx_inclusion_seconds_count", {"network": "bsc"}
    )
    assert count == 1 and took < 15
    print(f"send to 'included' on the log: {took:.2f} s")


async def test_a_pending_private_transaction_answers_by_hash_on_the_same_key(
    app_of: AppOf, builders: dict[str, MockBuilder], node: str, api_key: str
) -> None:
    client = await app_of("holds", builders=builders)
    raw = signed(sender_account(601))
    await rpc(client, api_key, SEND, [raw])
    _, answer, _ = await rpc(client, api_key, "eth_getTransactionByHash", [tx_hash(raw)])
    got = answer["result"]
    assert got is not None and got["hash"] == tx_hash(raw), answer
    assert got["blockNumber"] is None and got["from"] == sender_account(601).address.lower()
    assert got["nonce"] == "0x0" and got["value"] == "0x1"
    assert await node_rpc(node, "eth_getTransactionByHash", [tx_hash(raw)]) is None
    # another hash is the node's own answer
    _, answer, _ = await rpc(client, api_key, "eth_getTransactionByHash", ["0x" + "ab" * 32])
    assert answer["result"] is None, answer


async def test_replaced_by_another_transaction_of_the_same_nonce(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    client = await app_of("holds", builders=builders)
    acct = sender_account(602)
    held = signed(acct, nonce=0)
    await rpc(client, api_key, SEND, [held])
    await node_rpc(node, "eth_sendRawTransaction", [signed(acct, nonce=0, value=2)])

    async def replaced() -> bool:
        return "replaced" in await outcomes(redis, prefix, api_key, tx_hash(held))

    await eventually(replaced, 15, "the replacement on the key's log")
    assert counted(client, "holds", "replaced") == 1


async def test_a_bundle_is_given_up_after_its_max_block(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    client = await app_of("holds", builders=builders)
    head = int(await node_rpc(node, "eth_blockNumber", []), 16)
    txs = [signed(sender_account(603)), signed(sender_account(604))]
    bundle = {"txs": txs, "maxBlockNumber": hex(head + 2)}
    _, answer, _ = await rpc(client, api_key, "eth_sendBundle", [bundle])
    assert "result" in answer, answer
    for _ in range(3):
        await node_rpc(node, "evm_mine", [])

    async def given_up() -> bool:
        shown = [await outcomes(redis, prefix, api_key, tx_hash(t)) for t in txs]
        return all(any(o.startswith("given up") for o in s) for s in shown)

    await eventually(given_up, 15, "both transactions given up")
    assert counted(client, "holds", "given_up") == 2


async def test_two_gateways_follow_one_transaction_once(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    first = await app_of("lands", builders=builders)
    second = await app_of("lands", builders=builders)
    raw = signed(sender_account(605))
    for client in (first, second):  # the client sends it through both
        _, answer, _ = await rpc(client, api_key, SEND, [raw])
        assert answer["result"] == tx_hash(raw), answer

    async def included() -> bool:
        shown = await outcomes(redis, prefix, api_key, tx_hash(raw))
        return any(o.startswith("included") for o in shown)

    await eventually(included, 15, "the inclusion")
    await asyncio.sleep(2.5)  # two more rounds of both trackers: nothing more is counted
    assert counted(first, "lands", "included") + counted(second, "lands", "included") == 1
    shown = await outcomes(redis, prefix, api_key, tx_hash(raw))
    assert sum(o.startswith("included") for o in shown) == 1, shown


@pytest.fixture
async def other() -> AsyncIterator[MockBuilder]:
    builder = await start_mock_builder(56)  # takes, and never includes on the chain
    yield builder
    await builder.close()


async def _sent_to_both(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    other: MockBuilder,
    status: dict[str, bool],
    api_key: str,
    seed: int,
) -> tuple[Client, str]:
    """The app with builders ``holds`` and ``other`` (``status``: which speak the status
    method), and one signed transaction both of them took."""
    both = {"holds": builders["holds"], "other": other}
    client = await app_of("holds", "other", builders=both, status=status)
    raw = signed(sender_account(seed))
    await rpc(client, api_key, SEND, [raw])
    for builder in both.values():
        await eventually(lambda b=builder: tx_hash(raw) in b.taken, 15, "both took it")
    return client, raw


async def test_included_by_a_builder_on_its_status_before_the_receipt(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    other: MockBuilder,
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    both = {"holds": builders["holds"], "other": other}
    client = await app_of("holds", "other", builders=both, status={"holds": True, "other": False})
    raw = signed(sender_account(606))
    _, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert answer["result"] == tx_hash(raw), answer
    await eventually(lambda: tx_hash(raw) in other.taken, 15, "the other builder took it")
    other.included[tx_hash(raw)] = 4321  # its own block; the chain has no receipt

    async def included() -> bool:
        shown = await outcomes(redis, prefix, api_key, tx_hash(raw))
        return "included in block 4321" in shown

    await eventually(included, 15, "the inclusion by the other builder")
    assert await node_rpc(node, "eth_getTransactionReceipt", [tx_hash(raw)]) is None
    assert counted(client, "other", "included") == 1
    assert counted(client, "holds", "included") == 0
    both_asked = {m for m in builders["holds"].methods() + other.methods()}
    assert "eth_getTxStatus" in both_asked

    # the receipt arriving later counts nothing again: a second transaction followed to
    # its end after it shows the tracker's rounds went on
    await node_rpc(node, "eth_sendRawTransaction", [raw])
    assert await node_rpc(node, "eth_getTransactionReceipt", [tx_hash(raw)]) is not None
    later = signed(sender_account(607))
    await rpc(client, api_key, SEND, [later])
    await eventually(lambda: tx_hash(later) in builders["holds"].taken, 15, "taken")
    builders["holds"].included[tx_hash(later)] = 4322

    async def later_included() -> bool:
        return "included in block 4322" in await outcomes(redis, prefix, api_key, tx_hash(later))

    await eventually(later_included, 15, "the second inclusion")
    shown = await outcomes(redis, prefix, api_key, tx_hash(raw))
    assert sum(o.startswith("included") for o in shown) == 1, shown
    assert counted(client, "other", "included") + counted(client, "holds", "included") == 2


async def test_dropped_by_every_builder_that_has_it(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    other: MockBuilder,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    status = {"holds": False, "other": True}
    client, raw = await _sent_to_both(app_of, builders, other, status, api_key, 608)
    builders["holds"].dropped.add(tx_hash(raw))
    # one builder still has it pending: not dropped, whatever the rounds
    asked = len(other.methods())
    await eventually(lambda: len(other.methods()) >= asked + 3, 15, "three rounds asked")
    assert "dropped by the builders" not in await outcomes(redis, prefix, api_key, tx_hash(raw))
    other.dropped.add(tx_hash(raw))

    async def dropped() -> bool:
        return "dropped by the builders" in await outcomes(redis, prefix, api_key, tx_hash(raw))

    await eventually(dropped, 15, "the drop on the key's log")
    assert counted(client, "holds", "dropped") + counted(client, "other", "dropped") == 1


async def test_a_builder_status_that_errors_is_no_answer(
    app_of: AppOf,
    builders: dict[str, MockBuilder],
    other: MockBuilder,
    node: str,
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    status = {"holds": True, "other": True}
    _, raw = await _sent_to_both(app_of, builders, other, status, api_key, 609)
    other.down = True  # answers HTTP 503: no answer, so holds' drop alone is not every one
    builders["holds"].dropped.add(tx_hash(raw))
    asked = len(other.methods())
    await eventually(lambda: len(other.methods()) >= asked + 3, 15, "three rounds asked")
    assert "dropped by the builders" not in await outcomes(redis, prefix, api_key, tx_hash(raw))
    await node_rpc(node, "eth_sendRawTransaction", [raw])  # the public receipt still counts

    async def included() -> bool:
        shown = await outcomes(redis, prefix, api_key, tx_hash(raw))
        return any(o.startswith("included in block") for o in shown)

    await eventually(included, 15, "the inclusion by receipt")
