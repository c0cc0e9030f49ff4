"""Webhooks and alert rules through the admin API, as an operator's automation would
set them up: the real app, its metrics listener on port 0, a real signed delivery.

The receiver is on loopback, so the one setting moved is
``alerts.allow_private_targets`` (its refusal at the shipped default is checked
first, through the same endpoint).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.config import Config
from gateway.demo.mocknode import MockNode
from gateway.store.accounts import Store
from tests.helpers.admin import AdminStack, Tokens, admin_tokens
from tests.helpers.config import MakeConfig
from tests.helpers.webhooks import receiver

EMAIL = "hooks@example.com"


@pytest.fixture
def tokens() -> Tokens:
    return admin_tokens()


async def _stack(cfg: Config) -> AdminStack:
    return await AdminStack(cfg).start()


@pytest.fixture
async def stack(
    make_config: MakeConfig, tokens: Tokens, mock_nodes: dict[str, MockNode]
) -> AsyncIterator[AdminStack]:
    cfg = make_config({"admin": tokens.table(), "alerts": {"allow_private_targets": True}})
    s = await _stack(cfg)
    yield s
    await s.close()


async def test_a_private_target_is_refused_at_the_shipped_default(
    make_config: MakeConfig, tokens: Tokens, store: Store
) -> None:
    s = await _stack(make_config({"admin": tokens.table()}))
    try:
        await store.create_account(EMAIL, "a long password")
        status, body = await s.call(
            "POST", f"/accounts/{EMAIL}/webhooks", tokens.write, {"url": "http://127.0.0.1:9/x"}
        )
        assert status == 400 and "error" in body, body
        status, body = await s.call("GET", f"/accounts/{EMAIL}/webhooks", tokens.read)
        assert status == 200 and body == {"webhooks": []}
    finally:
        await s.close()


async def test_webhooks_and_rules_over_the_admin_api_deliver_signed_alerts(
    stack: AdminStack, tokens: Tokens, store: Store
) -> None:
    await store.create_account(EMAIL, "a long password")
    async with receiver() as rec:
        path = f"/accounts/{EMAIL}/webhooks"
        status, _ = await stack.call("POST", path, tokens.read, {"url": rec.url})
        assert status == 403  # a read token never writes
        status, made = await stack.call("POST", path, tokens.write, {"url": rec.url})
        assert status == 201 and made["secret"].startswith("whsec_"), made
        rec.secret = made["secret"]
        status, listed = await stack.call("GET", path, tokens.read)
        assert [w["id"] for w in listed["webhooks"]] == [made["id"]]
        assert "secret" not in listed["webhooks"][0]  # shown once, at creation

        status, queued = await stack.call("POST", f"{path}/{made['id']}/test", tokens.write)
        assert status == 202
        got = await rec.wait_for(1)
        assert got[0]["rule"] == "test" and got[0]["id"] == queued["id"]

        rules = f"/accounts/{EMAIL}/alerts"
        status, bad = await stack.call(
            "POST", rules, tokens.write, {"rule": "nope", "threshold": 1}
        )
        assert status == 400 and "error" in bad
        body = {"rule": "rate_limited", "threshold": 5, "window_s": 300}
        status, rule = await stack.call("POST", rules, tokens.write, body)
        assert status == 201 and rule["rule"] == "rate_limited", rule
        status, listed = await stack.call("GET", rules, tokens.read)
        assert [r["id"] for r in listed["alerts"]] == [rule["id"]]

        # a real client over its limit: the rule fires, signed, to the webhook
        account = await store.account_by_email(EMAIL)
        key, record = await store.create_key(account.id, name="busy")
        url = str(stack.server.make_url(f"/bsc/{key}"))
        call = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}

        async def one(session: aiohttp.ClientSession) -> int:
            async with session.post(url, json=call) as resp:
                await resp.read()
                return resp.status

        async with aiohttp.ClientSession() as session:
            statuses = await asyncio.gather(*(one(session) for _ in range(150)))
        assert statuses.count(429) > 5, statuses
        got = await rec.wait_for(2, timeout_s=20)
        fired = got[1]
        assert fired["rule"] == "rate_limited" and fired["key_id"] == record.id
        assert not rec.refused  # every delivery's signature checked out

        status, listed = await stack.call("GET", path, tokens.read)
        assert len(listed["webhooks"][0]["deliveries"]) >= 2  # the delivery log

        status, _ = await stack.call("DELETE", f"{rules}/{rule['id']}", tokens.write)
        assert status == 200
        status, _ = await stack.call("DELETE", f"{rules}/{rule['id']}", tokens.write)
        assert status == 404
        status, _ = await stack.call("DELETE", f"{path}/{made['id']}", tokens.write)
        assert status == 200
        status, listed = await stack.call("GET", path, tokens.read)
        assert listed == {"webhooks": []}

        status, audit = await stack.call("GET", "/audit?limit=20", tokens.read)
        actions = [e["action"] for e in audit["entries"] if e["status"] < 300]
        for action in ("webhook.create", "webhook.test", "alert.create", "alert.delete"):
            assert action in actions, actions
        assert made["secret"] not in str(audit)
