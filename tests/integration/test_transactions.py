"""Raw transactions through the real app: decoded first, broadcast, the private route, limits.

Two mock nodes of chain 56 (each its own mempool, as separate nodes are),
mock builders that record what they got, the real Redis. What a node or a
builder received is read from its own counters, never from the gateway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from gateway import typedefs as T
from gateway.app import create_app
from gateway.demo.mockbuilder import MockBuilder
from gateway.demo.mocknode import MockNode
from gateway.redis import keyspace as ks
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from gateway.store.keytx import set_private_tx
from gateway.telemetry.metrics import METRICS
from tests.helpers.config import MakeConfig
from tests.helpers.txapp import JSON, SEND, AppFactory, Client, rpc, sent
from tests.helpers.txs import sender_account, signed, tx_hash
from tests.helpers.waiting import eventually


# -- decoded before any node sees it ---------------------------------------------
@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("0xf86c01", "rlp: "),
        ("0x02c3010203", "rlp: too few elements for types.DynamicFeeTx"),
        ("0x05c0", "transaction type not supported"),
        (signed(sender_account(1), chain_id=97), "invalid sender: invalid chain id for signer"),
    ],
)
async def test_what_is_not_a_transaction_for_this_chain_reaches_no_node(
    make_app: AppFactory,
    nodes: list[MockNode],
    builders: list[MockBuilder],
    api_key: str,
    raw: str,
    words: str,
) -> None:
    client = await make_app()
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["error"]["code"] == -32000, answer
    assert answer["error"]["message"].startswith(words), answer
    assert answer["id"] == 7
    assert sent(nodes) == [0, 0] and not any(b.received for b in builders)


async def test_a_non_hex_argument_is_invalid_params(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    for params in ([], ["f86c"], [5], ["0x01", "0x02"]):
        _, answer, _ = await rpc(client, api_key, SEND, params)
        assert answer["error"]["code"] == -32602, (params, answer)
    assert sent(nodes) == [0, 0]


# -- broadcast -------------------------------------------------------------------
async def test_broadcast_to_every_node_answers_the_hash_and_a_resend_is_accepted(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app()
    raw = signed(sender_account(2))
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: sent(nodes) == [1, 1], 10)
    # the same bytes again: each node says "already known", which is acceptance
    status, again, _ = await rpc(client, api_key, SEND, [raw])
    assert again["result"] == tx_hash(raw), again
    await eventually(lambda: sent(nodes) == [2, 2], 10)
    assert not any(b.received for b in builders)  # the public route: no builder


async def test_accepted_while_another_node_is_down(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    nodes[0].down = True  # refuses connections from now on, before its probe notices
    raw = signed(sender_account(3))
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: nodes[1].by_method[SEND] == 1, 10)


async def test_a_rejection_by_every_node_comes_back_in_the_nodes_words(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    sender = sender_account(4)
    status, answer, _ = await rpc(client, api_key, SEND, [signed(sender, nonce=5)])
    assert status == 200 and "nonce too high" in answer["error"]["message"], answer


async def test_nonce_too_low_is_accepted_only_when_a_node_has_the_transaction(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    sender = sender_account(5)
    first = signed(sender, nonce=0)
    assert (await rpc(client, api_key, SEND, [first]))[1]["result"] == tx_hash(first)
    await eventually(lambda: sent(nodes) == [1, 1], 10)
    # another transaction with the used nonce: "nonce too low" everywhere, and no node
    # has it by hash: a rejection, in the node's words
    other = signed(sender, nonce=0, value=2)
    _, answer, _ = await rpc(client, api_key, SEND, [other])
    assert "nonce too low" in answer["error"]["message"], answer
    assert sent(nodes, "eth_getTransactionByHash") == [1, 1]  # it was looked up


async def test_tx_broadcast_one_sends_to_one_node(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app({"tx_broadcast": "one"})
    raw = signed(sender_account(6))
    assert (await rpc(client, api_key, SEND, [raw]))[1]["result"] == tx_hash(raw)
    assert sorted(sent(nodes)) == [0, 1]


async def test_no_node_in_service_is_502(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    pool = client.app[T.POOLS]["bsc"]
    # The nodes really go down and the probe takes them out (one failed probe
    # does, within probe_interval_s). Flipping the nodes' flags by hand raced a
    # probe in flight, whose answer set a node healthy again (a 200 in a full run).
    for mock in nodes:
        mock.down = True
    await eventually(lambda: not pool.in_service(), 10)
    status, answer, _ = await rpc(client, api_key, SEND, [signed(sender_account(7))])
    words = "Upstream unavailable: no upstream node in service"
    assert status == 502 and answer["error"]["message"] == words, answer


# -- the private route -------------------------------------------------------------
async def test_private_plan_sends_to_every_builder_and_no_node(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app(plan={"private_tx": "on"})
    raw = signed(sender_account(8))
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: all(b.methods() == [SEND] for b in builders), 10)
    assert builders[0].received[0][1] == [raw]
    assert sent(nodes) == [0, 0]


async def test_every_builder_down_is_502_and_nothing_leaks(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app(plan={"private_tx": "on"})
    for builder in builders:
        builder.down = True
    status, answer, _ = await rpc(client, api_key, SEND, [signed(sender_account(9))])
    assert status == 502 and answer["error"]["code"] == -32603, answer
    assert answer["error"]["data"]["reason"] == "every private endpoint failed"
    assert sent(nodes) == [0, 0]


async def test_fallback_goes_public_only_when_every_builder_fails(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app(plan={"private_tx": "fallback"})
    raw = signed(sender_account(10))
    assert (await rpc(client, api_key, SEND, [raw]))[1]["result"] == tx_hash(raw)
    assert sent(nodes) == [0, 0]
    for builder in builders:
        builder.down = True
    raw = signed(sender_account(16))  # the nodes never saw the first one
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: sent(nodes) == [1, 1], 10)


async def test_the_owners_toggle_turns_one_key_private(
    make_app: AppFactory,
    nodes: list[MockNode],
    builders: list[MockBuilder],
    store: Store,
    account: str,
) -> None:
    client = await make_app()
    private_key, rec = await store.create_key(account, name="private")
    public_key, _ = await store.create_key(account, name="public")
    acct = sender_account(11)
    raw = signed(acct)
    assert (await rpc(client, public_key, SEND, [raw]))[1]["result"] == tx_hash(raw)
    await set_private_tx(store, account, rec.id, "on")
    raw2 = signed(acct, nonce=1)
    assert (await rpc(client, private_key, SEND, [raw2]))[1]["result"] == tx_hash(raw2)
    await eventually(lambda: all(b.methods() == [SEND] for b in builders), 10)
    assert builders[0].received[0][1] == [raw2]
    await eventually(lambda: sent(nodes) == [1, 1], 10)  # only the public one


async def test_a_changed_choice_reaches_a_process_that_cached_the_old_one(
    make_app: AppFactory, builders: list[MockBuilder], store: Store, account: str
) -> None:
    """The key's choice is cached for admission.key_ttl_s (here 10 minutes): only the
    key-change message can make the next transactions go private within the test."""
    client = await make_app(raw={"admission": {"key_ttl_s": 600}})
    key, rec = await store.create_key(account, name="switching")
    acct = sender_account(21)
    first = signed(acct)
    assert (await rpc(client, key, SEND, [first]))[1]["result"] == tx_hash(first)  # "" cached
    assert not any(b.received for b in builders)
    await set_private_tx(store, account, rec.id, "on")
    nonce = 1

    async def goes_private() -> bool:
        nonlocal nonce
        raw = signed(acct, nonce=nonce)
        nonce += 1
        await rpc(client, key, SEND, [raw])
        return any(b.received for b in builders)

    await eventually(goes_private, 10, "a transaction on the private route", interval_s=0.2)


# -- the sender limit --------------------------------------------------------------
async def test_one_sender_through_two_keys_is_limited_and_others_are_not(
    make_app: AppFactory, store: Store, account: str
) -> None:
    client = await make_app({"tx_per_sender_rate": 0.001, "tx_per_sender_burst": 2})
    key_a, _ = await store.create_key(account, name="a")
    key_b, _ = await store.create_key(account, name="b")
    flood = sender_account(12)
    assert "result" in (await rpc(client, key_a, SEND, [signed(flood, nonce=0)]))[1]
    assert "result" in (await rpc(client, key_b, SEND, [signed(flood, nonce=1)]))[1]
    status, answer, headers = await rpc(client, key_a, SEND, [signed(flood, nonce=2)])
    assert status == 429 and answer["error"]["code"] == -32005, answer
    assert "sender limit" in answer["error"]["data"]["reason"]
    assert flood.address.lower() in answer["error"]["data"]["reason"]
    assert int(headers["Retry-After"]) >= 1
    other = signed(sender_account(13))
    assert (await rpc(client, key_a, SEND, [other]))[1]["result"] == tx_hash(other)


# -- bundles -------------------------------------------------------------------------
async def test_bundle_is_checked_rebuilt_and_fanned_out_with_its_own_rate(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app(plan={"bundle_rate": 0.001, "bundle_burst": 1})
    sender = sender_account(14)
    txs = [signed(sender, nonce=0), signed(sender, nonce=1)]
    bundle = {"txs": txs, "maxBlockNumber": 100, "Evil": "x", "revertingTxHashes": []}
    status, answer, _ = await rpc(client, api_key, "eth_sendBundle", [bundle])
    assert status == 200 and answer["result"].startswith("0x"), answer
    await eventually(lambda: all(b.methods() == ["eth_sendBundle"] for b in builders), 10)
    got = builders[0].received[0][1][0]
    assert got == {"txs": txs, "maxBlockNumber": 100, "revertingTxHashes": []}
    assert sent(nodes) == [0, 0]
    status, answer, _ = await rpc(client, api_key, "eth_sendBundle", [bundle])
    assert status == 429 and "bundle_rate" in answer["error"]["data"]["reason"], answer
    bad = {"txs": [txs[0], signed(sender, nonce=2, chain_id=1)]}
    status, answer, _ = await rpc(client, api_key, "eth_sendBundle", [bad])
    assert answer["error"]["code"] in (-32000, -32005), answer


async def test_bundle_is_not_offered_without_private_endpoints(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], api_key: str
) -> None:
    client: Client = await aiohttp_client(TestServer(create_app(make_config())))
    _, answer, _ = await rpc(client, api_key, "eth_sendBundle", [{"txs": []}])
    assert answer["error"]["code"] == -32601, answer


# -- what the key's log and the metrics show -------------------------------------------
async def test_log_shows_hash_and_route_never_the_bytes(
    make_app: AppFactory, nodes: list[MockNode], redis: Redis, prefix: str, api_key: str
) -> None:
    client = await make_app()
    raw = signed(sender_account(15))
    await rpc(client, api_key, SEND, [raw])
    key = ks.tx_log(prefix, key_hash(api_key))

    async def logged() -> bool:
        return bool(await redis.exists(key))

    await eventually(logged, 10, "the transaction log entry")
    rows: Any = await redis.xrange(key)
    ((_id, entry),) = rows
    assert entry["hash"] == tx_hash(raw) and entry["route"] == "public"
    assert set(entry["accepted_by"].split(",")) <= {"bsc-0", "bsc-1"}
    assert entry["outcome"] == "accepted"
    assert raw[10:] not in str(entry)
    metrics = client.app[METRICS].registry
    assert (
        metrics.get_sample_value(
            "gateway_transactions_total",
            {"network": "bsc", "method": SEND, "route": "public", "outcome": "accepted"},
        )
        == 1
    )


async def test_accepted_by_one_node_while_the_other_rejects_it(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    """Never answered as failed while any node accepted: one node's "nonce too high"
    (its mempool missed the sender's first transaction) does not outweigh the other's yes."""
    client = await make_app()
    sender = sender_account(17)
    first = signed(sender, nonce=0)
    nodes[1].down = True  # the first transaction reaches node 0 only
    assert (await rpc(client, api_key, SEND, [first]))[1]["result"] == tx_hash(first)
    nodes[1].down = False
    pool = client.app[T.POOLS]["bsc"]
    for node in pool.nodes:  # back in service without waiting for a probe
        node.healthy, node.down_until = True, 0.0
    second = signed(sender, nonce=1)
    status, answer, _ = await rpc(client, api_key, SEND, [second])
    assert status == 200 and answer["result"] == tx_hash(second), answer
    await eventually(lambda: sent(nodes) == [2, 1], 10)  # node 1 said "nonce too high"


async def test_websocket_and_batch_take_the_same_path(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    client = await make_app()
    raw_ws, bad, raw_batch = (
        signed(sender_account(18)),
        signed(sender_account(19), chain_id=97),
        signed(sender_account(20)),
    )
    async with client.ws_connect(f"/bsc/{api_key}") as ws:
        await ws.send_str(
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": SEND, "params": [raw_ws]}).decode()
        )
        assert (await ws.receive_json(timeout=10))["result"] == tx_hash(raw_ws)
        await ws.send_str(
            orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": SEND, "params": [bad]}).decode()
        )
        refused = await ws.receive_json(timeout=10)
        assert refused["error"]["message"].startswith("invalid sender"), refused
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": SEND, "params": [raw_batch]},
        {"jsonrpc": "2.0", "id": 2, "method": SEND, "params": [bad]},
        {"jsonrpc": "2.0", "id": 3, "method": "eth_chainId", "params": []},
    ]
    resp = await client.post(f"/bsc/{api_key}", data=orjson.dumps(batch), headers=JSON)
    answers = {a["id"]: a for a in orjson.loads(await resp.read())}
    assert answers[1]["result"] == tx_hash(raw_batch)
    assert answers[2]["error"]["code"] == -32000
    assert answers[3]["result"] == "0x38"
    await eventually(lambda: sent(nodes) == [2, 2], 10)  # the refused one reached no node
