"""Real wallets' transactions through the gateway to real EVM nodes (Hardhat, chain 56).

web3.py, ethers v6 and viem (pinned in tests/js) each send a transfer and a
contract call, the same signed bytes again, and a transaction signed for
another chain, on the public route (two Hardhat nodes: every transaction
reaches both) and the private one (mock builders that record what they got
and include it in the chain, as a builder does; the key's transaction log
says where each went). Hardhat words a resend of a mined transaction "Nonce
too low": the gateway accepts it only because the nodes then return it by
hash. With every builder down, nothing reaches the node and the wallet gets
the 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from gateway.redis import keyspace as ks
from gateway.rpc.auth import key_hash
from gateway.store.accounts import Store
from tests.helpers.config import MakeConfig
from tests.helpers.evmstack import JS, emitter_code, hardhat_node, hardhat_ready, rpc
from tests.helpers.txs import sender_account, tx_hash
from tests.helpers.waiting import eventually

_RECURSION_LIMIT = sys.getrecursionlimit()  # web3 raises it on import (see test_ws_clients)
from web3 import AsyncHTTPProvider, AsyncWeb3  # noqa: E402
from web3.exceptions import Web3RPCError  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hardhat_ready(), reason="npm install --prefix tests/js has not run"),
]
TO = "0x" + "22" * 20
SEND = "eth_sendRawTransaction"
SEEDS = {"web3": 501, "ethers": 502, "viem": 503, "deployer": 504}


async def _fund(url: str) -> None:
    """Each client's own account gets 10 ETH on the node (straight from Hardhat's own)."""
    rich = (await rpc(url, "eth_accounts", []))[0]
    for seed in SEEDS.values():
        to = sender_account(seed).address
        await rpc(url, "eth_sendTransaction", [{"from": rich, "to": to, "value": hex(10**19)}])


@contextlib.asynccontextmanager
async def _two_nodes() -> AsyncIterator[list[str]]:
    async with hardhat_node(56) as first, hardhat_node(56) as second:
        for url in (first, second):
            await _fund(url)
        yield [first, second]


async def _gateway(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], nodes: list[str], **net: Any
) -> Any:
    plan = net.pop("plan", {})
    cfg = make_config(
        {
            "plans": {"free": {"rate": 1000, "burst": 1000, **plan}},
            "networks": {"bsc": net},
            "upstream": {"max_lag_blocks": 10_000},
        },
        upstreams={"bsc": nodes},
    )
    client = await aiohttp_client(TestServer(create_app(cfg)))
    return client


async def _web3(url: str, contract: str) -> dict[str, Any]:
    """web3.py: a transfer, a contract call, the call's bytes again, another chain's bytes."""
    w3 = AsyncWeb3(AsyncHTTPProvider(url, request_kwargs={"timeout": 30}))
    acct = sender_account(SEEDS["web3"])
    nonce = await w3.eth.get_transaction_count(acct.address, "pending")
    fees: dict[str, Any] = {"maxFeePerGas": 10**11, "maxPriorityFeePerGas": 10**9, "chainId": 56}
    transfer = _sign(acct, {"to": TO, "value": 1, "gas": 21000, "nonce": nonce, **fees})
    sent = await w3.eth.send_raw_transaction(transfer.raw_transaction)
    receipt = await w3.eth.wait_for_transaction_receipt(sent, timeout=30, poll_latency=0.25)
    call = _sign(
        acct,
        {
            "to": contract,
            "data": "0x" + "07".rjust(64, "0"),
            "gas": 100_000,
            "nonce": nonce + 1,
            **fees,
        },
    )
    called = await w3.eth.send_raw_transaction(call.raw_transaction)
    call_receipt = await w3.eth.wait_for_transaction_receipt(called, timeout=30, poll_latency=0.25)
    again = await w3.eth.send_raw_transaction(call.raw_transaction)
    other = _sign(
        acct, {"to": TO, "value": 1, "gas": 21000, "nonce": nonce + 2, **fees, "chainId": 97}
    )
    wrong = ""
    try:
        await w3.eth.send_raw_transaction(other.raw_transaction)
    except Web3RPCError as exc:
        wrong = str(exc)
    await w3.provider.disconnect()
    return {
        "transfer": "0x" + bytes(sent).hex(),
        "transferStatus": receipt["status"],
        "call": "0x" + bytes(called).hex(),
        "callStatus": call_receipt["status"],
        "callLogs": len(call_receipt["logs"]),
        "again": "0x" + bytes(again).hex(),
        "wrongChain": wrong,
        "signed": ["0x" + bytes(transfer.hash).hex(), "0x" + bytes(call.hash).hex()],
    }


async def _js(library: str, url: str, contract: str) -> dict[str, Any]:
    key = "0x" + bytes(sender_account(SEEDS[library]).key).hex()
    proc = await asyncio.create_subprocess_exec(
        "node", str(JS / "tx_send.mjs"), library, url, key, contract,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return seen


async def _deploy(url: str) -> str:
    """The emitter contract, deployed with a signed transaction through the gateway."""
    w3 = AsyncWeb3(AsyncHTTPProvider(url, request_kwargs={"timeout": 30}))
    acct = sender_account(SEEDS["deployer"])
    nonce = await w3.eth.get_transaction_count(acct.address, "pending")
    tx = {
        "data": emitter_code(), "gas": 200_000, "nonce": nonce, "chainId": 56,
        "maxFeePerGas": 10**11, "maxPriorityFeePerGas": 10**9,
    }  # fmt: skip
    sent = await w3.eth.send_raw_transaction(_sign(acct, tx).raw_transaction)
    receipt = await w3.eth.wait_for_transaction_receipt(sent, timeout=30, poll_latency=0.25)
    await w3.provider.disconnect()
    return str(receipt["contractAddress"])


def _sign(acct: Any, tx: dict[str, Any]) -> Any:
    return acct.sign_transaction(tx)


def _check(seen: dict[str, Any]) -> None:
    assert seen["transferStatus"] == 1 and seen["callStatus"] == 1, seen
    assert seen["callLogs"] == 1, seen  # the contract really ran
    assert seen["again"] == seen["call"], seen  # a resend of the same bytes: the same hash
    assert "invalid chain id" in seen["wrongChain"], seen


async def test_public_route_reaches_every_node(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], store: Store, account: str
) -> None:
    async with _two_nodes() as nodes:
        client = await _gateway(make_config, aiohttp_client, nodes)
        key, _ = await store.create_key(account, name="wallet")
        url = str(client.make_url(f"/bsc/{key}"))
        contract = await _deploy(url)
        for node in nodes:  # the deployment reached both nodes: the contract is on both
            assert await rpc(node, "eth_getCode", [contract, "latest"]) != "0x"
        results = {"web3": await _web3(url, contract)}
        assert results["web3"]["signed"] == [results["web3"]["transfer"], results["web3"]["call"]]
        for library in ("ethers", "viem"):
            results[library] = await _js(library, url, contract)
        for library, seen in results.items():
            _check(seen)
            for node in nodes:  # broadcast: each node has each transaction
                for tx in (seen["transfer"], seen["call"]):
                    assert await rpc(node, "eth_getTransactionByHash", [tx]) is not None, library


async def test_private_route_reaches_builders_only_and_all_down_is_502(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    store: Store,
    account: str,
    redis: Redis,
    prefix: str,
) -> None:
    async with hardhat_node(56) as node:
        await _fund(node)

        async def include(raw: str) -> None:  # a builder puts it in its next block
            with contextlib.suppress(RuntimeError):  # the other builder was first
                await rpc(node, "eth_sendRawTransaction", [raw])

        builders: list[MockBuilder] = [await start_mock_builder(56, include) for _ in range(2)]
        try:
            client = await _gateway(
                make_config,
                aiohttp_client,
                [node],
                private_tx=[b.url for b in builders],
                plan={"private_tx": "on"},
            )
            key, _ = await store.create_key(account, name="trader")
            url = str(client.make_url(f"/bsc/{key}"))
            contract = await _deploy(url)
            sent: list[str] = []
            for library in ("web3", "ethers", "viem"):
                seen = await (
                    _web3(url, contract) if library == "web3" else _js(library, url, contract)
                )
                _check(seen)
                sent += [seen["transfer"], seen["call"]]
                for builder in builders:  # every builder got each transaction
                    got = {tx_hash(p[0]) for m, p in builder.received if m == SEND}
                    assert {seen["transfer"], seen["call"]} <= got, library
            # the key's log: each went the private route, accepted by builders only
            log_key = ks.tx_log(prefix, key_hash(key))
            await eventually(lambda: _logged(redis, log_key, sent), 15, "the transaction log")
            rows: Any = await redis.xrange(log_key)
            for _id, entry in rows:
                assert entry["route"] == "private", entry
                # builders are named by host and port (never the URL's path or query)
                names = {urlsplit(b.url).netloc for b in builders}
                assert set(entry["accepted_by"].split(",")) <= names

            for builder in builders:
                builder.down = True
            w3 = AsyncWeb3(AsyncHTTPProvider(url))
            acct = sender_account(SEEDS["web3"])
            nonce = await w3.eth.get_transaction_count(acct.address, "pending")
            raw = _sign(acct,
                {"to": TO, "value": 1, "gas": 21000, "nonce": nonce, "chainId": 56,
                 "maxFeePerGas": 10**11, "maxPriorityFeePerGas": 10**9}
            ).raw_transaction  # fmt: skip
            with pytest.raises(Exception, match=r"502|Upstream unavailable"):
                await w3.eth.send_raw_transaction(raw)
            await w3.provider.disconnect()
            # nothing leaked to the public node
            assert (
                int(await rpc(node, "eth_getTransactionCount", [acct.address, "pending"]), 16)
                == nonce
            )
        finally:
            for builder in builders:
                await builder.close()


async def _logged(redis: Redis, key: str, hashes: list[str]) -> bool:
    rows: Any = await redis.xrange(key)
    seen = {entry["hash"] for _id, entry in rows}
    return set(hashes) <= seen
