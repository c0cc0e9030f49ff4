"""What a transaction may cost the gateway and its nodes, and where it may go.

Real signed transactions (eth-account) through the real app, two mock
nodes and two mock builders that count what they got, the real Redis:
an oversized transaction and an oversized bundle reach no one; every
transaction of a bundle counts in its sender's bucket; the senders of
one bundle are one Redis call; BSC's conditional send and the private
send take the transaction path; a transaction no endpoint took shows its
hash and route in the key's request log.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from gateway.config import ConfigError
from gateway.config.load import config_from_dict
from gateway.demo.mockbuilder import MockBuilder
from gateway.demo.mocknode import MockNode
from gateway.redis import keyspace as ks
from gateway.rpc.auth import key_hash
from tests.helpers.txapp import JSON, SEND, AppFactory, rpc, sent
from tests.helpers.txs import sender_account, signed, tx_hash
from tests.helpers.waiting import eventually

BUNDLE = "eth_sendBundle"
# The sender limit barely refills during a test (one token in 1,000 s), so what a call
# spends is what the next one sees; the burst stays the shipped 20.
SLOW_REFILL = {"tx_per_sender_rate": 0.001}


def bundle_of(*raws: str) -> list[dict[str, Any]]:
    return [{"txs": list(raws), "maxBlockNumber": 1_000}]


# -- sizes -------------------------------------------------------------------------------
async def test_a_transaction_over_128_kib_is_oversized_data_and_reaches_no_node(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app()
    acct = sender_account(301)
    big = signed(acct, data=b"\x01" * (128 * 1024), gas=3_000_000)
    status, answer, _ = await rpc(client, api_key, SEND, [big])
    assert status == 200 and answer["error"] == {"code": -32000, "message": "oversized data"}
    _, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(signed(acct, nonce=1), big))
    assert answer["error"] == {"code": -32000, "message": "oversized data"}, answer
    # just under the limit is a transaction like any other
    fits = signed(acct, data=b"\x01" * (127 * 1024), gas=3_000_000)
    _, answer, _ = await rpc(client, api_key, SEND, [fits])
    assert answer.get("result") == tx_hash(fits), answer
    await eventually(lambda: sent(nodes) == [1, 1], 10)
    assert not any(b.received for b in builders)


async def test_a_bundle_over_tx_bundle_max_reaches_no_builder(
    make_app: AppFactory, builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app()
    raws = [signed(sender_account(310 + i)) for i in range(51)]
    status, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*raws))
    assert status == 200 and answer["error"]["code"] == -32602, answer
    assert "51 transactions, at most 50" in answer["error"]["message"]
    assert not any(b.received for b in builders)
    _, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*raws[:50]))
    assert answer.get("result", "").startswith("0x"), answer


# -- the sender limit, bundles included ------------------------------------------------------
async def test_every_transaction_of_a_bundle_counts_against_its_sender(
    make_app: AppFactory, builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app(SLOW_REFILL, plan={"private_tx": "on"})  # builders take any nonce
    acct = sender_account(320)
    # more transactions of one sender than its burst: never taken whole
    over = [signed(acct, nonce=n) for n in range(21)]
    status, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*over))
    assert answer["error"]["code"] == -32005, answer
    assert "more than its burst" in answer["error"]["data"]["reason"]
    assert acct.address.lower() in answer["error"]["data"]["reason"]
    assert not any(b.received for b in builders)
    # 15 in a bundle leave 5 raw sends, and no more
    _, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*over[:15]))
    assert "result" in answer, answer
    for nonce in range(15, 20):
        _, answer, _ = await rpc(client, api_key, SEND, [over[nonce]])
        assert "result" in answer, (nonce, answer)
    status, answer, headers = await rpc(client, api_key, SEND, [over[20]])
    assert status == 429 and "sender limit" in answer["error"]["data"]["reason"], answer
    assert int(headers["Retry-After"]) >= 1


async def test_a_refused_bundle_spends_no_senders_tokens(
    make_app: AppFactory, api_key: str
) -> None:
    client = await make_app(SLOW_REFILL)
    fresh, spent = sender_account(330), sender_account(331)
    for nonce in range(20):
        _, answer, _ = await rpc(client, api_key, SEND, [signed(spent, nonce=nonce)])
        assert "result" in answer, answer
    _, answer, _ = await rpc(
        client, api_key, BUNDLE, bundle_of(signed(fresh), signed(spent, nonce=20))
    )
    assert answer["error"]["code"] == -32005, answer
    assert spent.address.lower() in answer["error"]["data"]["reason"]
    # the fresh sender still has its whole burst
    whole = [signed(fresh, nonce=n) for n in range(20)]
    _, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*whole))
    assert "result" in answer, answer


async def _evalsha_calls(redis: Redis) -> int:
    stats: dict[str, Any] = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_the_senders_of_one_bundle_are_one_redis_call(
    make_app: AppFactory, redis: Redis, api_key: str
) -> None:
    """Script calls for a bundle of one sender and for one of ten senders are the same."""
    client = await make_app()
    await rpc(client, api_key, "eth_chainId", [])  # the key admitted once (leases warm)

    async def calls_for(raws: list[str]) -> int:
        before = await _evalsha_calls(redis)
        _, answer, _ = await rpc(client, api_key, BUNDLE, bundle_of(*raws))
        assert "result" in answer, answer
        return await _evalsha_calls(redis) - before

    one_sender = await calls_for([signed(sender_account(340), nonce=n) for n in range(10)])
    ten_senders = await calls_for([signed(sender_account(341 + n)) for n in range(10)])
    # One script call a sender would be nine more; one more is allowed for the
    # limiter's own background give-back of an idle lease landing in a window.
    assert ten_senders <= one_sender + 1, (one_sender, ten_senders)


# -- every method that carries a raw transaction ---------------------------------------------
@pytest.mark.parametrize(
    ("entry", "where"),
    [
        (["eth_sendRawTransactionConditional"], "networks.bsc.extra_methods[0]"),
        (["eth_chainId", "eth_sendBundle"], "networks.bsc.extra_methods[1]"),
        (
            {"eth_sendPrivateTransaction": 8},
            "networks.bsc.extra_methods.eth_sendPrivateTransaction",
        ),
        (["eth_sendRaw*"], "networks.bsc.extra_methods[0]"),
    ],
)
def test_an_offered_raw_transaction_method_is_refused_at_load(entry: Any, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict({"networks": {"bsc": {"extra_methods": entry}}})
    assert str(err.value).startswith(where + ":"), err.value
    assert "raw transaction" in str(err.value)


async def test_conditional_send_takes_the_transaction_path(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    method = "eth_sendRawTransactionConditional"
    conditions = {"knownAccounts": {}, "blockNumberMax": "0x100", "Leak": "x"}
    client = await make_app(plan={"private_tx": "on"})
    other_chain = signed(sender_account(350), chain_id=97)
    _, answer, _ = await rpc(client, api_key, method, [other_chain, conditions])
    assert answer["error"]["message"].startswith("invalid sender"), answer
    raw = signed(sender_account(351))
    status, answer, _ = await rpc(client, api_key, method, [raw, conditions])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: all(b.methods() == [method] for b in builders), 10)
    assert builders[0].received[0][1] == [raw, {"knownAccounts": {}, "blockNumberMax": "0x100"}]
    assert sent(nodes, method) == [0, 0] and sent(nodes) == [0, 0]


async def test_conditional_send_on_the_public_route_reaches_every_node_checked(
    make_app: AppFactory, nodes: list[MockNode], api_key: str
) -> None:
    method = "eth_sendRawTransactionConditional"
    client = await make_app(SLOW_REFILL)
    acct = sender_account(352)
    for nonce in range(20):
        _, answer, _ = await rpc(client, api_key, SEND, [signed(acct, nonce=nonce)])
    _, answer, _ = await rpc(client, api_key, method, [signed(acct, nonce=20), {}])
    assert "sender limit" in answer["error"]["data"]["reason"], answer
    await rpc(client, api_key, method, [signed(sender_account(353)), {}])
    await eventually(lambda: sent(nodes, method) == [1, 1], 10)


async def test_private_send_never_goes_public(
    make_app: AppFactory, nodes: list[MockNode], builders: list[MockBuilder], api_key: str
) -> None:
    client = await make_app()  # the plan's route is public
    raw = signed(sender_account(360))
    params = [{"tx": raw, "maxBlockNumber": "0x10", "preferences": {"fast": True}}]
    status, answer, _ = await rpc(client, api_key, "eth_sendPrivateTransaction", params)
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: all(b.methods() == [SEND] for b in builders), 10)
    assert sent(nodes) == [0, 0]
    for builder in builders:
        builder.down = True
    status, answer, _ = await rpc(
        client, api_key, "eth_sendPrivateTransaction", [{"tx": signed(sender_account(361))}]
    )
    assert status == 502, answer
    assert sent(nodes) == [0, 0]


# -- the request log ----------------------------------------------------------------------------
async def test_a_transaction_no_endpoint_took_shows_its_hash_and_route_in_the_request_log(
    make_app: AppFactory,
    builders: list[MockBuilder],
    redis: Redis,
    prefix: str,
    api_key: str,
) -> None:
    client = await make_app(plan={"private_tx": "on"})
    for builder in builders:
        builder.down = True
    raw = signed(sender_account(370))
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 502, answer
    key = ks.insight_log(prefix, key_hash(api_key))

    async def logged() -> bool:
        return bool(await redis.exists(key))

    await eventually(logged, 10, "the request log entry")
    rows: Any = await redis.xrange(key)
    ((_id, entry),) = rows
    assert entry["method"] == SEND and entry["code"] == "-32603", entry
    assert entry["note"] == f"{tx_hash(raw)} via private: not accepted", entry


async def _hash_reads(redis: Redis) -> int:
    stats: dict[str, Any] = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("hget", "hgetall"))


async def test_a_batch_of_lookups_by_hash_reads_the_pending_set_once(
    make_app: AppFactory, redis: Redis, api_key: str
) -> None:
    """A private key's lookups by hash may find its pending transaction; a batch of them
    is one read of the key's pending set, not one Redis call per lookup."""
    client = await make_app(plan={"private_tx": "on"})
    raw = signed(sender_account(380))
    _, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert answer["result"] == tx_hash(raw), answer

    async def reads_for(n: int) -> int:
        await asyncio.sleep(0.6)  # past the pending set's half-second memory
        before = await _hash_reads(redis)
        batch = [
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "eth_getTransactionByHash",
                "params": [tx_hash(raw)],
            }
            for i in range(n)
        ]
        resp = await client.post(f"/bsc/{api_key}", data=orjson.dumps(batch), headers=JSON)
        answers = orjson.loads(await resp.read())
        assert all(a["result"]["hash"] == tx_hash(raw) for a in answers), answers[:1]
        return await _hash_reads(redis) - before

    # A read a lookup would be 49 more; one more is allowed for the cordon book's
    # re-read (a hash read every 5 s in every app) landing in a window.
    one, fifty = await reads_for(1), await reads_for(50)
    assert fifty <= one + 1, (one, fifty)
