"""A key's Transactions page through the real app: the "Private transactions" choice (CSRF
like every form, another account's key is 404), the gateway following it, and the log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway.config import Config
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import User, new_email
from tests.helpers.txs import sender_account, signed, tx_hash
from tests.helpers.waiting import eventually

AiohttpClient = Callable[..., Any]


@pytest.fixture
async def builder() -> AsyncIterator[MockBuilder]:
    started = await start_mock_builder(56)
    yield started
    await started.close()


@pytest.fixture
def config(make_config: MakeConfig, builder: MockBuilder) -> Config:
    return make_config({"networks": {"bsc": {"private_tx": [builder.url]}}})


async def test_private_transactions_choice_is_saved_followed_and_logged(
    client: Client, aiohttp_client: AiohttpClient, builder: MockBuilder
) -> None:
    alice = User(await aiohttp_client(client.server), new_email())
    await alice.signup()
    key, key_id = await alice.create_key(name="trader")
    keys = await alice.get("/dashboard/keys")
    links = {a.text.strip(): a.attrs["href"] for a in keys.find(data_key_id=key_id).tags("a")}
    page = links["Transactions"]
    assert page == f"/dashboard/keys/{key_id}/transactions"
    doc = await alice.get(page)
    assert "checked" in doc.find(data_testid="private-tx-off").attrs
    for token in ("", "x" * 43):  # a wrong CSRF token changes nothing
        assert (await alice.post(page, {"private_tx": "on"}, csrf=token)).status == 403
    assert (await alice.post(page, {"private_tx": "maybe"})).status == 400
    resp = await alice.post(page, {"private_tx": "on"})
    assert resp.status == 303 and resp.headers["Location"] == page + "?saved=1"
    doc = await alice.get(resp.headers["Location"])
    assert "checked" in doc.find(data_testid="private-tx-on").attrs

    raw = signed(sender_account(40))
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]}
    resp = await client.post(
        f"/bsc/{key}", data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    answer = orjson.loads(await resp.read())
    assert answer.get("result") == tx_hash(raw), answer
    assert builder.methods() == ["eth_sendRawTransaction"]  # the private route

    async def logged() -> bool:
        tables = (await alice.get(page)).find_all(data_testid="tx-log")
        return bool(tables) and tx_hash(raw) in tables[0].text

    await eventually(logged, 15, "the transaction on the key's page")
    assert raw[10:60] not in (await alice.get(page)).testid("tx-log")

    bob = User(await aiohttp_client(client.server), new_email())
    await bob.signup()
    await bob.get("/dashboard/keys")
    assert (await bob.post(page, {"private_tx": "off"})).status == 404


async def test_bundle_options_are_saved_from_the_page(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    alice = User(await aiohttp_client(client.server), new_email())
    await alice.signup()
    _key, key_id = await alice.create_key(name="searcher")
    page = f"/dashboard/keys/{key_id}/transactions"
    doc = await alice.get(page)
    assert "checked" not in doc.find(data_testid="no-merge").attrs
    form = {"private_tx": "on", "no_merge": "on", "mev_builders": "bloxroute, 48club"}
    resp = await alice.post(page, form)
    assert resp.status == 303, resp.status
    doc = await alice.get(page)
    assert "checked" in doc.find(data_testid="no-merge").attrs
    assert "checked" not in doc.find(data_testid="position-first").attrs
    assert doc.find(data_testid="mev-builders").attrs["value"] == "bloxroute,48club"
    assert (await alice.post(page, {"private_tx": "on", "mev_builders": "a b"})).status == 400
