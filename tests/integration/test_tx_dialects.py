"""Builders as they speak: each dialect's request shapes, secrets from the environment.

Four mock builders, one per dialect, each checking the request shapes the
way the real one documents them (``gateway.demo.mockbuilder``), behind the
real app on the private route; real signed transactions (eth-account).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway import typedefs as T
from gateway.app import create_app
from gateway.config import ConfigError
from gateway.config.load import config_from_dict
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from gateway.demo.mocknode import MockNode
from gateway.store.accounts import Store
from gateway.store.keytx import set_bundle_options
from tests.helpers.config import MakeConfig
from tests.helpers.txapp import ROOMY, SEND, Client, rpc, sent
from tests.helpers.txs import sender_account, signed, tx_hash
from tests.helpers.waiting import eventually

AUTH = "Bearer test-blxr-key"  # a stand-in: the real one is the operator's secret
SOULPOINT = sender_account(500)  # the 48 Club member's key
DIALECTS = ("plain", "48club", "blockrazor", "bloxroute")


@pytest.fixture
async def speakers() -> AsyncIterator[dict[str, MockBuilder]]:
    started = {
        "plain": await start_mock_builder(56),
        "48club": await start_mock_builder(56, None, "48club", soulpoint=SOULPOINT.address),
        "blockrazor": await start_mock_builder(56, None, "blockrazor"),
        "bloxroute": await start_mock_builder(56, None, "bloxroute", auth=AUTH),
    }
    yield started
    for builder in started.values():
        await builder.close()


def entries(speakers: dict[str, MockBuilder]) -> list[dict[str, str]]:
    out = []
    for dialect, builder in speakers.items():
        entry = {"url": builder.url, "name": dialect, "dialect": dialect}
        if dialect == "48club":
            entry["sign_key_env"] = "TEST_SOULPOINT_KEY"
        if dialect == "bloxroute":
            entry["auth_header_env"] = "TEST_BLXR_AUTH"
        out.append(entry)
    return out


@pytest.fixture
async def client(
    make_config: MakeConfig,
    aiohttp_client: Callable[..., Any],
    nodes: list[MockNode],
    speakers: dict[str, MockBuilder],
    monkeypatch: pytest.MonkeyPatch,
) -> Client:
    monkeypatch.setenv("TEST_BLXR_AUTH", AUTH)
    monkeypatch.setenv("TEST_SOULPOINT_KEY", SOULPOINT.key.hex())
    cfg = make_config(
        {
            "plans": {"free": {**ROOMY, "private_tx": "on"}},
            "networks": {"bsc": {"private_tx": entries(speakers)}},
        },
        upstreams={"bsc": [n.url for n in nodes]},
    )
    app: Client = await aiohttp_client(TestServer(create_app(cfg)))
    pool = app.app[T.POOLS]["bsc"]
    await eventually(lambda: len(pool.in_service()) == len(nodes), 15)
    return app


async def test_a_raw_transaction_reaches_every_builder_in_its_dialect(
    client: Client, speakers: dict[str, MockBuilder], nodes: list[MockNode], api_key: str
) -> None:
    raw = signed(sender_account(501))
    status, answer, _ = await rpc(client, api_key, SEND, [raw])
    assert status == 200 and answer["result"] == tx_hash(raw), answer
    await eventually(lambda: all(tx_hash(raw) in b.taken for b in speakers.values()), 10)
    assert speakers["bloxroute"].received == [
        ("bsc_private_tx", {"transaction": raw[2:], "mev_builders": ["all"]})
    ]
    for dialect in ("plain", "48club", "blockrazor"):
        assert speakers[dialect].received == [(SEND, [raw])], dialect
    assert sent(nodes) == [0, 0]


async def test_a_bundle_in_each_dialect_with_the_keys_options(
    client: Client, speakers: dict[str, MockBuilder], store: Store, account: str
) -> None:
    key, rec = await store.create_key(account, name="bundles")
    await set_bundle_options(
        store, account, rec.id, no_merge=True, position_first=False, mev_builders=["bloxroute"]
    )
    acct = sender_account(502)
    txs = [signed(acct, nonce=0), signed(acct, nonce=1)]
    reverting = [tx_hash(txs[1])]
    bundle = {"txs": txs, "maxBlockNumber": 1_000, "revertingTxHashes": reverting}
    status, answer, _ = await rpc(client, key, "eth_sendBundle", [bundle])
    assert status == 200 and answer["result"].startswith("0x"), answer
    await eventually(lambda: all(b.bundles for b in speakers.values()), 10)
    assert speakers["plain"].bundles == [bundle]
    signed_bundle = speakers["48club"].bundles[0]  # the mock checked the signature
    assert signed_bundle["48spSign"].startswith("0x") and len(signed_bundle["48spSign"]) == 132
    assert speakers["blockrazor"].bundles == [{**bundle, "noMerge": True, "positionFirst": False}]
    assert speakers["bloxroute"].received == [
        (
            "blxr_submit_bundle",
            {
                "transaction": [t[2:] for t in txs],
                "mev_builders": ["bloxroute"],
                "block_number": hex(1_000),
                "reverting_hashes": reverting,
            },
        )
    ]


async def test_a_builders_error_comes_back_in_its_words(
    client: Client, speakers: dict[str, MockBuilder], nodes: list[MockNode], api_key: str
) -> None:
    for builder in speakers.values():
        builder.reject = "nonce too low: next nonce 7, tx nonce 3"
    status, answer, _ = await rpc(client, api_key, SEND, [signed(sender_account(503))])
    assert status == 200, answer
    assert answer["error"]["message"] == "nonce too low: next nonce 7, tx nonce 3", answer
    assert sent(nodes) == [0, 0]


async def test_an_error_with_an_http_error_status_is_still_an_answer(
    make_config: MakeConfig, aiohttp_client: Callable[..., Any], nodes: list[MockNode], api_key: str
) -> None:
    """A builder answering its JSON-RPC error with HTTP 400 or 500 (some do) has answered:
    with fallback, the transaction stays private and the client reads the builder's words."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32000, "message": "insufficient funds for gas * price + value"},
        }
        return web.json_response(body, status=500)

    app = web.Application()
    app.router.add_post("/", handle)
    server = TestServer(app)
    await server.start_server()
    try:
        cfg = make_config(
            {
                "plans": {"free": {**ROOMY, "private_tx": "fallback"}},
                "networks": {"bsc": {"private_tx": [str(server.make_url("/"))]}},
            },
            upstreams={"bsc": [n.url for n in nodes]},
        )
        client: Client = await aiohttp_client(TestServer(create_app(cfg)))
        _, answer, _ = await rpc(client, api_key, SEND, [signed(sender_account(504))])
        assert answer["error"]["message"].startswith("insufficient funds"), answer
        assert sent(nodes) == [0, 0]  # an answer: no fallback to the public nodes
    finally:
        await server.close()


def test_secrets_come_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"url": "https://b.example/", "dialect": "bloxroute", "auth_header_env": "NOPE_X"}
    monkeypatch.delenv("NOPE_X", raising=False)
    with pytest.raises(ConfigError, match=r"private_tx\[0\]\.auth_header_env: .*NOPE_X"):
        config_from_dict({"networks": {"bsc": {"private_tx": [entry]}}})
    with pytest.raises(ConfigError, match=r"private_tx\[0\]\.auth: unknown config key"):
        config_from_dict(
            {"networks": {"bsc": {"private_tx": [{"url": "https://b.example/", "auth": "x"}]}}}
        )
    with pytest.raises(ConfigError, match=r"private_tx\[0\]\.dialect: must be one of"):
        config_from_dict(
            {"networks": {"bsc": {"private_tx": [{"url": "https://b.example/", "dialect": "x"}]}}}
        )
