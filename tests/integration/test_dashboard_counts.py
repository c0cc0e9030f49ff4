"""The Usage and Requests pages count the same calls, and a node's error answer (such
as ``nonce too low``) is the call's outcome there, never an upstream failure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gateway.config import Config
from gateway.demo.mocknode import MockNode
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import Element, User, new_email
from tests.helpers.txs import sender_account, signed

AiohttpClient = Callable[..., Any]


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    """Fast insight flushes; a plan roomy enough that no call here is rate-limited."""
    return make_config(
        {"insight": {"interval_s": 0.05}, "plans": {"free": {"rate": 100, "burst": 100}}}
    )


async def _user(aiohttp_client: AiohttpClient, client: Client) -> User:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    return user


async def _post(client: Client, key: str, body: Any) -> tuple[int, Any]:
    resp = await client.post(f"/bsc/{key}", json=body)
    return resp.status, await resp.json()


async def _usage_until(user: User, key_id: str, testid: str, want: str) -> Element:
    """The Usage detail once ``testid`` shows ``want`` (counts are flushed once a second)."""
    for _ in range(200):
        card = (await user.get(f"/dashboard/usage?key={key_id}")).find(data_testid="usage-detail")
        if card.testid(testid) == want:
            return card
        await asyncio.sleep(0.05)
    raise AssertionError(f"{testid}: {card.testid(testid)!r}, not {want!r}")


async def _requests_calls(user: User, key_id: str, want: int) -> dict[str, int]:
    """The last hour's calls per method on the Requests page, once they add up to ``want``."""
    calls: dict[str, int] = {}
    for _ in range(200):
        doc = await user.get(f"/dashboard/keys/{key_id}/requests")
        tables = doc.find_all(data_testid="method-insight")
        calls = {}
        if tables:
            for row in tables[0].tags("tr")[1:]:
                calls[row.attrs["data-method"]] = int(row.testid("calls").replace(",", ""))
        if sum(calls.values()) >= want:
            return calls
        await asyncio.sleep(0.05)
    raise AssertionError(f"Requests page shows {calls}, not {want} calls")


async def test_a_batch_of_n_calls_counts_n_on_usage_and_on_requests(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    """Before, Requests counted the batch once (under its one method) and Usage five times."""
    user = await _user(aiohttp_client, client)
    key, key_id = await user.create_key()
    batch = [{"jsonrpc": "2.0", "id": i, "method": "eth_chainId", "params": []} for i in range(4)]
    batch.append({"jsonrpc": "2.0", "id": 9, "method": "eth_blockNumber", "params": []})
    status, answer = await _post(client, key, batch)
    assert status == 200 and len(answer) == 5, answer
    await _usage_until(user, key_id, "usage-total", "5")
    assert await _requests_calls(user, key_id, 5) == {"eth_chainId": 4, "eth_blockNumber": 1}
    doc = await user.get(f"/dashboard/keys/{key_id}/requests")
    assert "A batch counts once" not in doc.text


async def test_each_call_of_a_batch_keeps_its_own_error_code(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await _user(aiohttp_client, client)
    key, key_id = await user.create_key()
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_noSuchMethod", "params": []},
        {"jsonrpc": "2.0", "method": "eth_chainId", "params": []},  # a notification
    ]
    status, answer = await _post(client, key, batch)
    assert status == 200 and len(answer) == 2, answer  # the notification has no answer
    calls = await _requests_calls(user, key_id, 3)
    assert calls == {"eth_chainId": 2, "(not offered)": 1}
    doc = await user.get(f"/dashboard/keys/{key_id}/requests")
    rows = {
        r.attrs["data-method"]: r
        for r in doc.find_all(data_testid="method-insight")[0].tags("tr")[1:]
    }
    assert rows["(not offered)"].testid("errors") == "1"
    assert rows["eth_chainId"].testid("errors") == "0"


async def test_nonce_too_low_is_an_error_answer_not_an_upstream_failure(
    client: Client, aiohttp_client: AiohttpClient, mock_nodes: dict[str, MockNode]
) -> None:
    user = await _user(aiohttp_client, client)
    key, key_id = await user.create_key()
    sender = sender_account(7)
    send = "eth_sendRawTransaction"
    first = {"jsonrpc": "2.0", "id": 1, "method": send, "params": [signed(sender, nonce=0)]}
    status, answer = await _post(client, key, first)
    assert status == 200 and "result" in answer, answer
    again = [signed(sender, nonce=0, value=2)]
    status, answer = await _post(client, key, {**first, "params": again})
    assert status == 200 and "nonce too low" in answer["error"]["message"], answer
    card = await _usage_until(user, key_id, "usage-error-answers", "1")
    assert card.testid("usage-errors") == "0"  # the node answered: no upstream failure
    assert "Error answers (from the node)" in card.text
    # a node that does not answer at all is an upstream failure, counted apart
    mock_nodes["bsc"].down = True
    call = {"jsonrpc": "2.0", "id": 2, "method": "eth_getBalance", "params": ["0x" + "11" * 20]}
    status, _ = await _post(client, key, call)
    assert status in (502, 504)
    card = await _usage_until(user, key_id, "usage-errors", "1")
    assert card.testid("usage-error-answers") == "1"
    assert "Upstream failures" in card.text
