"""Usage alerts end to end: real calls through the real app drive a key's counters, the
app's evaluator fires the rule once, and a real receiver gets one signed POST.

The receiver listens on loopback, so these apps allow private targets
(``alerts.allow_private_targets``, the setting made for tests and the demo);
test_alerts_targets.py checks that the shipped default refuses it. The
evaluator ticks every second here instead of five: the latency it adds is
measured at the default in test_alerts_latency.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from gateway.alerts import api
from gateway.app import create_app
from gateway.config import Config
from gateway.demo.mocknode import MockNode
from gateway.store.accounts import DAY_MS, Store
from tests.helpers.config import Client, MakeConfig
from tests.helpers.waiting import eventually
from tests.helpers.webhooks import Receiver, receiver

AiohttpServer = Callable[..., Any]
ALERTS = {"interval_s": 1, "allow_private_targets": True}


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    return make_config({"alerts": ALERTS, "plans": {"payg": {"daily_quota": 20}}})


async def _webhook(store: Store, cfg: Config, account: str, rec: Receiver) -> str:
    made = await api.create_webhook(store, cfg.alerts, account, rec.url)
    assert made["secret"].startswith("whsec_") and made["url"] == rec.url
    rec.secret = made["secret"]
    return str(made["id"])


async def _calls(base: str, key: str, n: int, method: str = "eth_chainId") -> list[int]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": []}
    async with aiohttp.ClientSession() as http:

        async def one() -> int:
            async with http.post(f"{base}/bsc/{key}", json=body) as resp:
                await resp.read()
                return resp.status

        return list(await asyncio.gather(*(one() for _ in range(n))))


async def _ticks_pass(redis: Redis, prefix: str, cfg: Config, n: int = 2) -> None:
    """Wait until the evaluators have evaluated ``n`` more intervals (their claims show it),
    plus the usage flush, so "no further delivery" is checked after real evaluations."""
    span = int(cfg.alerts.interval_s * 1000)
    target = int(time.time() * 1000) // span + n

    async def evaluated() -> bool:
        return bool(await redis.keys(f"{prefix}:al:t:*:{target}"))

    await eventually(evaluated, (n + 3) * cfg.alerts.interval_s, f"{n} more evaluations")
    await asyncio.sleep(0.5)  # the deliverer polls the queue every second


async def test_a_key_over_its_rate_limit_gets_exactly_one_rate_limited_delivery(
    client: Client, store: Store, account: str, config: Config, redis: Redis, prefix: str
) -> None:
    base = str(client.make_url("")).rstrip("/")
    async with receiver() as rec:
        await _webhook(store, config, account, rec)
        rule = await api.create_rule(store, config.alerts, account, "rate_limited", 5)
        assert rule["window_s"] == 300
        # a key made after its rule counts from zero: called before the evaluator's next tick
        key, record = await store.create_key(account, name="busy")
        # the free plan's burst is 50, and at most 32 of one key's calls wait for room
        statuses = await _calls(base, key, 150)
        refused = statuses.count(429)
        assert refused > 5, statuses
        got = await rec.wait_for(1)
        event = got[0]
        assert event["rule"] == "rate_limited" and event["key_id"] == record.id
        assert event["account"] == account and event["threshold"] == 5
        assert event["window_s"] == 300 and event["value"] > 5
        assert event["id"].startswith("evt_") and event["at"].endswith("Z")
        assert set(event) == {
            "id",
            "rule",
            "account",
            "key_id",
            "value",
            "threshold",
            "window_s",
            "at",
        }
        # still over, same window: no second alert. The delivery took seconds, in which
        # the bucket refilled (25 a second, up to its burst of 50): 150 at once are over
        # it whatever the wait was (40 were not once the wait passed 2 s on a loaded box)
        more = await _calls(base, key, 150)
        assert 429 in more
        await _ticks_pass(redis, prefix, config, 3)  # evaluations that must not fire again
        assert len(rec.got) == 1 and rec.refused == [], (rec.got, rec.refused)


async def test_a_failing_receiver_gets_the_delivery_on_the_third_attempt(
    make_config: MakeConfig, store: Store, account: str, aiohttp_server: AiohttpServer
) -> None:
    # the knob this test is about: retries 0.2 s, then 0.4 s apart (30 s, 60 s shipped)
    cfg = make_config({"alerts": {**ALERTS, "retry_base_s": 0.2}})
    await aiohttp_server(create_app(cfg))
    async with receiver() as rec:
        rec.answers = [500, 500]
        webhook_id = await _webhook(store, cfg, account, rec)
        sent = await api.send_test(store, cfg.alerts, account, webhook_id)
        got = await rec.wait_for(1)
        assert got[0]["id"] == sent["id"] and got[0]["rule"] == "test"
        assert rec.tries == 3

        async def logged_delivered() -> bool:
            log = await api.delivery_log(store, cfg.alerts, account, webhook_id)
            return bool(log) and log[0]["status"] == "delivered"

        await eventually(logged_delivered, 5, "the log to say delivered")
        (row,) = await api.delivery_log(store, cfg.alerts, account, webhook_id)
        assert row["attempts"] == 3 and row["http_status"] == 200 and row["last_error"] == ""
        listed = await api.list_webhooks(store, cfg.alerts, account)
        assert listed[0]["deliveries"] == [row] and "secret" not in listed[0]


async def test_two_gateways_on_one_redis_deliver_once(
    make_config: MakeConfig,
    store: Store,
    account: str,
    aiohttp_server: AiohttpServer,
    redis: Redis,
    prefix: str,
) -> None:
    cfg = make_config({"alerts": ALERTS, "plans": {"payg": {"daily_quota": 10}}})
    first = await aiohttp_server(create_app(cfg))
    second = await aiohttp_server(create_app(cfg))
    await store.set_plan(account, "payg")
    key, record = await store.create_key(account, name="shared")
    async with receiver() as rec:
        await _webhook(store, cfg, account, rec)
        await api.create_rule(store, cfg.alerts, account, "quota_percent", 50)
        await api.send_test(store, cfg.alerts, account, (await _hooks(store, cfg, account))[0])
        await rec.wait_for(1)  # one test delivery, claimed by one of the two
        for server in (first, second):
            assert 200 in await _calls(str(server.make_url("")).rstrip("/"), key, 4)
        got = await rec.wait_for(2)
        assert [e["rule"] for e in got] == ["test", "quota_percent"]
        assert got[1]["key_id"] == record.id and got[1]["value"] >= 50
        await _ticks_pass(redis, prefix, cfg, 3)  # both evaluators tick again
        assert len(rec.got) == 2 and rec.tries == 2, rec.got


async def _hooks(store: Store, cfg: Config, account: str) -> list[str]:
    return [h["id"] for h in await api.list_webhooks(store, cfg.alerts, account)]


async def test_quota_percent_fires_once_the_day_s_units_reach_it(
    client: Client, store: Store, account: str, config: Config, redis: Redis, prefix: str
) -> None:
    await store.set_plan(account, "payg")  # 20 units a day in this module's config
    key, record = await store.create_key(account, name="metered")
    await store.create_key(account, name="idle")
    base = str(client.make_url("")).rstrip("/")
    async with receiver() as rec:
        await _webhook(store, config, account, rec)
        await api.create_rule(store, config.alerts, account, "quota_percent", 40)
        assert set(await _calls(base, key, 3)) == {200}  # 15 %: not yet
        await _ticks_pass(redis, prefix, config)
        assert rec.got == []
        assert set(await _calls(base, key, 6)) == {200}  # 45 % of the day's 20 units
        (event,) = await rec.wait_for(1)
        assert event["rule"] == "quota_percent" and event["key_id"] == record.id
        assert event["value"] >= 40 and event["window_s"] == 86_400
        await _ticks_pass(redis, prefix, config)
        assert len(rec.got) == 1, rec.got  # once a day; the idle key never reached it


async def test_key_expiring_days_fires_for_the_expiring_key_only(
    client: Client, store: Store, account: str, config: Config, redis: Redis, prefix: str
) -> None:
    _, soon = await store.create_key(account, name="soon", expires_in_ms=2 * DAY_MS)
    await store.create_key(account, name="later", expires_in_ms=30 * DAY_MS)
    await store.create_key(account, name="never")
    async with receiver() as rec:
        await _webhook(store, config, account, rec)
        rule = await api.create_rule(store, config.alerts, account, "key_expiring_days", 3)
        assert rule["window_s"] == 3 * 86_400
        (event,) = await rec.wait_for(1)
        assert event["rule"] == "key_expiring_days" and event["key_id"] == soon.id
        assert 1.9 < event["value"] <= 2.0
        started = time.monotonic()
        await _ticks_pass(redis, prefix, config)
        assert len(rec.got) == 1, (rec.got, time.monotonic() - started)


async def test_error_percent_fires_once_enough_calls_fail(
    client: Client,
    store: Store,
    account: str,
    config: Config,
    redis: Redis,
    prefix: str,
    mock_nodes: dict[str, MockNode],
) -> None:
    key, record = await store.create_key(account, name="failing")
    base = str(client.make_url("")).rstrip("/")
    async with receiver() as rec:
        await _webhook(store, config, account, rec)
        # counted from the rule's making: the key's earlier calls are not in it
        assert set(await _calls(base, key, 30, "eth_blockNumber")) == {200}

        async def flushed() -> bool:  # each process writes its counts once a second
            return (await store.usage(record.id)).total == 30

        await eventually(flushed, 10, "the 30 calls to be counted")
        await api.create_rule(store, config.alerts, account, "error_percent", 50)
        node = mock_nodes["bsc"]
        node.options = dataclasses.replace(node.options, error_rate=1.0)  # every call fails
        few = config.alerts.error_min_calls - 5
        for _ in range(few):  # all failing, but too few calls to judge
            assert (await _calls(base, key, 1, "eth_getBalance"))[0] != 200
        await _ticks_pass(redis, prefix, config)
        assert rec.got == []
        for _ in range(10):
            await _calls(base, key, 1, "eth_getBalance")
        (event,) = await rec.wait_for(1)
        assert event["rule"] == "error_percent" and event["key_id"] == record.id
        assert event["value"] > 50 and event["window_s"] == 300
