"""The Alerts page through its forms (no browser): a webhook's secret shown once, rules
added and removed, "Send test" logged, and nothing changed without the CSRF token or
on another account's webhook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.config import Config
from gateway.redis import keyspace as ks
from tests.helpers.config import Client, MakeConfig
from tests.helpers.dashboard import PASSWORD, User, new_email, parse
from tests.helpers.waiting import eventually
from tests.helpers.webhooks import receiver

AiohttpClient = Callable[..., Any]


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    # the receiver listens on loopback: allowed, as for the demo (see test_alerts_targets.py)
    return make_config({"alerts": {"allow_private_targets": True}})


async def _user(client: Client, aiohttp_client: AiohttpClient) -> User:
    user = User(await aiohttp_client(client.server), new_email())
    await user.signup()
    return user


async def test_add_a_webhook_and_a_rule_and_send_a_test(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await _user(client, aiohttp_client)
    page = await user.get("/dashboard/alerts")
    assert page.find_all(data_testid="no-webhooks") and page.find_all(data_testid="no-rules")
    async with receiver() as rec:
        resp = await user.post("/dashboard/alerts/webhooks", {"url": rec.url})
        assert resp.status == 200
        shown = parse(await resp.text())
        secret = shown.testid("new-secret")
        assert secret.startswith("whsec_")
        rec.secret = secret
        again = await user.get("/dashboard/alerts")
        assert secret not in str(again.text) and not again.find_all(data_testid="new-secret")
        (hook,) = again.find_all(data_testid="webhook")
        assert hook.testid("webhook-url") == rec.url
        webhook_id = hook.attrs["data-webhook-id"]

        resp = await user.post(
            "/dashboard/alerts/rules",
            {"rule": "rate_limited", "threshold": "50", "window_s": "300"},
        )
        assert resp.status == 303 and resp.headers["Location"].endswith("msg=rule-added")
        page = await user.get("/dashboard/alerts")
        (rule,) = page.find_all(data_testid="rule")
        assert rule.testid("rule-words") == "More than 50 rate-limited calls in 5 min"

        resp = await user.post(f"/dashboard/alerts/webhooks/{webhook_id}/test")
        assert resp.status == 303
        (event,) = await rec.wait_for(1)
        assert event["rule"] == "test"

        async def logged() -> bool:
            doc = await user.get("/dashboard/alerts")
            rows = doc.find_all(data_testid="delivery-row")
            return len(rows) == 1 and rows[0].attrs["data-status"] == "delivered"

        await eventually(logged, 10, "the delivery log to show the test")
        row = (await user.get("/dashboard/alerts")).find(data_testid="delivery-row")
        assert row.testid("delivery-attempts") == "1"
        assert row.testid("delivery-status") == "Delivered (HTTP 200)"

        resp = await user.post(f"/dashboard/alerts/rules/{rule.attrs['data-rule-id']}/delete")
        assert resp.status == 303
        resp = await user.post(f"/dashboard/alerts/webhooks/{webhook_id}/delete")
        assert resp.status == 303
        page = await user.get("/dashboard/alerts")
        assert not page.find_all(data_testid="webhook") and not page.find_all(data_testid="rule")


async def test_bad_input_is_a_sentence_on_the_page(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    user = await _user(client, aiohttp_client)
    cases = [
        ("/dashboard/alerts/webhooks", {"url": "ftp://example.com/x"}, "https://"),
        ("/dashboard/alerts/rules", {"rule": "nope", "threshold": "1"}, "The rule must be one of"),
        ("/dashboard/alerts/rules", {"rule": "quota_percent", "threshold": "x"}, "a number"),
        ("/dashboard/alerts/rules", {"rule": "quota_percent", "threshold": "500"}, "1 to 100"),
        (
            "/dashboard/alerts/rules",
            {"rule": "rate_limited", "threshold": "5", "window_s": "7"},
            "window_s",
        ),
    ]
    for path, form, words in cases:
        await user.get("/dashboard/alerts")
        resp = await user.post(path, form)
        text = await resp.text()
        assert resp.status == 400, (form, text[:300])
        assert words in parse(text).testid("error"), (form, parse(text).testid("error"))


async def test_no_change_without_the_csrf_token_or_on_another_account(
    client: Client, aiohttp_client: AiohttpClient
) -> None:
    owner = await _user(client, aiohttp_client)
    other = await _user(client, aiohttp_client)
    resp = await owner.post("/dashboard/alerts/webhooks", {"url": "https://93.184.216.34/h"})
    assert resp.status == 200
    hook = (await owner.get("/dashboard/alerts")).find(data_testid="webhook")
    webhook_id = hook.attrs["data-webhook-id"]
    resp = await owner.post("/dashboard/alerts/rules", {"rule": "x"}, csrf="forged")
    assert resp.status == 403
    await other.get("/dashboard/alerts")
    for action in ("test", "delete"):
        resp = await other.post(f"/dashboard/alerts/webhooks/{webhook_id}/{action}")
        assert resp.status == 404, action
    assert (await owner.get("/dashboard/alerts")).find_all(data_testid="webhook")


async def test_deleting_the_account_removes_its_webhooks_and_rules(
    client: Client, aiohttp_client: AiohttpClient, redis: Redis, prefix: str
) -> None:
    user = await _user(client, aiohttp_client)
    resp = await user.post("/dashboard/alerts/webhooks", {"url": "https://93.184.216.34/h"})
    assert resp.status == 200
    await user.get("/dashboard/alerts")
    resp = await user.post("/dashboard/alerts/rules", {"rule": "quota_percent", "threshold": "80"})
    assert resp.status == 303
    account_id = str(await redis.get(ks.email(prefix, user.email)))
    assert (
        await redis.exists(
            ks.alert_webhooks(prefix, account_id), ks.alert_rules(prefix, account_id)
        )
        == 2
    )
    assert await redis.sismember(ks.alert_accounts(prefix), account_id)
    await user.get("/dashboard/security")
    form = {"current_password": PASSWORD, "confirm": "DELETE"}
    assert (await user.post("/dashboard/security/delete", form)).status == 200
    assert not await redis.exists(
        ks.alert_webhooks(prefix, account_id), ks.alert_rules(prefix, account_id)
    )
    assert not await redis.sismember(ks.alert_accounts(prefix), account_id)
