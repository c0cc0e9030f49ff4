"""Processes share the evaluation: in one interval, each bucket of accounts is evaluated
by the first evaluator to reach it, and a rule fires once however many evaluate."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.alerts import api
from gateway.alerts.evaluator import Evaluator
from gateway.config import Config
from gateway.redis import keyspace as ks
from gateway.store.accounts import DAY_MS, Store
from tests.helpers.config import MakeConfig


async def test_one_interval_is_evaluated_once_and_the_next_one_again(
    make_config: MakeConfig, store: Store, redis: Redis, prefix: str
) -> None:
    cfg: Config = make_config()
    accounts = []
    for i in range(12):  # spread over several buckets
        acct = await store.create_account(f"share-{i}-{prefix}@example.com", "password-123")
        await store.create_key(acct.id, name="soon", expires_in_ms=DAY_MS)
        await api.create_webhook(store, cfg.alerts, acct.id, "https://93.184.216.34/h")
        await api.create_rule(store, cfg.alerts, acct.id, "key_expiring_days", 2)
        await api.create_rule(store, cfg.alerts, acct.id, "rate_limited", 5)
        accounts.append(acct.id)
    span = int(cfg.alerts.interval_s * 1000)
    now = [(await store.now_ms()) // span * span + 1]  # not 7 ms before an interval's end
    # both in the same interval; first's clock 7 ms ahead, so a reading says whose it is
    first = Evaluator(redis, cfg, clock_ms=lambda: now[0] + 7)
    second = Evaluator(redis, cfg, clock_ms=lambda: now[0])

    assert await first.tick() == 12  # every account's expiring key, once
    assert await second.tick() == 0  # same interval: every bucket already taken
    now[0] += span
    assert await second.tick() == 0  # the next interval is evaluated again: nothing new
    assert await first.tick() == 0  # and it was second's, not first's
    readings = [
        await redis.hget(ks.alert_readings(prefix, rule["id"], key.id), "lt")
        for acct in accounts
        for rule in await api.list_rules(store, acct)
        if rule["rule"] == "rate_limited"
        for key in await store.list_keys(acct)
    ]
    assert readings and all(lt == str(now[0]) for lt in readings), readings
    queued = await redis.zcard(ks.alert_queue(prefix))
    assert queued == 12  # one delivery per account's webhook
