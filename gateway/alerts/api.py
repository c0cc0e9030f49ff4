"""An account's webhooks and alert rules: plain async functions over the ``Store``.

The dashboard's Alerts page and the admin API call these and nothing else.
Each takes the ``Store`` (its Redis client and key prefix), the ``[alerts]``
settings where a limit applies, the account (its email, or its id
``acct_...``) and plain values, and returns plain dicts ready for JSON.
A refusal raises ``StoreError`` (``NotFound`` for a missing account, webhook or
rule) whose message is a sentence for the user; nothing else is raised for
bad input.

- ``create_webhook(store, cfg, account, url)`` -> ``{id, url, secret, created_at}``
  (the secret only here, once)
- ``list_webhooks(store, cfg, account)`` -> ``[{id, url, created_at, deliveries: [...]}]``
- ``delete_webhook(store, account, webhook_id)`` -> ``{id, deleted: True}``
- ``delivery_log(store, cfg, account, webhook_id)`` -> ``[{id, event_id, rule, key_id,
  status, attempts, http_status, last_error, created_at, updated_at, next_at}]``
- ``send_test(store, cfg, account, webhook_id)`` -> ``{id, delivery_id}`` (queued now)
- ``create_rule(store, cfg, account, rule, threshold, window_s=None)`` ->
  ``{id, rule, threshold, window_s, created_at, description}``
- ``list_rules(store, account)`` -> ``[{id, rule, threshold, window_s, created_at,
  description}]``
- ``delete_rule(store, account, rule_id)`` -> ``{id, deleted: True}``

Times are ms since the epoch (Redis time). The signing secret is kept in
Redis as is (docs/ALERTS.md says why and how it is protected) and is never
returned after ``create_webhook``.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.alerts import queue, rules
from gateway.alerts.evaluator import seed_readings
from gateway.alerts.signing import new_secret
from gateway.alerts.targets import TargetRefused, check_url
from gateway.config import AlertsConfig
from gateway.redis import keyspace as ks
from gateway.store.accounts import NotFound, Store, StoreError

# KEYS[1] the hash  ARGV[1] cap  ARGV[2] field  ARGV[3] value
# returns 1 once the field is set, 0 when the hash already holds ARGV[1] fields
ADD_CAPPED_LUA = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1
"""


async def account_id_of(store: Store, account: str) -> str:
    """The id of the account named by its email or id; ``NotFound`` if there is none."""
    if account.startswith("acct_"):
        return (await store.account(account)).id
    return (await store.account_by_email(account)).id


async def create_webhook(store: Store, cfg: AlertsConfig, account: str, url: str) -> dict[str, Any]:
    if not isinstance(url, str):
        raise StoreError("url must be a string")
    account_id = await account_id_of(store, account)
    try:
        url = await check_url(url, cfg.allow_private_targets)
    except TargetRefused as exc:
        raise StoreError(str(exc)) from None
    secret = new_secret()
    webhook = {
        "id": queue.new_id("wh"),
        "url": url,
        "secret": secret,
        "created_at": await store.now_ms(),
    }
    await _add_capped(
        store,
        ks.alert_webhooks(store.prefix, account_id),
        cfg.max_webhooks,
        webhook,
        f"an account has at most {cfg.max_webhooks} webhooks; remove one first",
    )
    return {k: webhook[k] for k in ("id", "url", "secret", "created_at")}


async def list_webhooks(store: Store, cfg: AlertsConfig, account: str) -> list[dict[str, Any]]:
    account_id = await account_id_of(store, account)
    hooks = await webhooks_of(store.redis, store.prefix, account_id)
    out = []
    for hook in sorted(hooks.values(), key=lambda h: h["created_at"]):
        log = await queue.log_of(store.redis, store.prefix, account_id, hook["id"], cfg.log_cap)
        out.append(
            {
                "id": hook["id"],
                "url": hook["url"],
                "created_at": hook["created_at"],
                "deliveries": log,
            }
        )
    return out


async def delete_webhook(store: Store, account: str, webhook_id: str) -> dict[str, Any]:
    account_id = await account_id_of(store, account)
    removed = await store.redis.hdel(ks.alert_webhooks(store.prefix, account_id), webhook_id)
    if not removed:
        raise NotFound(f"no webhook {webhook_id!r}")
    # queued deliveries to it find it gone at their next attempt and are dropped
    await store.redis.delete(ks.alert_log(store.prefix, account_id, webhook_id))
    return {"id": webhook_id, "deleted": True}


async def delivery_log(
    store: Store, cfg: AlertsConfig, account: str, webhook_id: str
) -> list[dict[str, Any]]:
    account_id = await account_id_of(store, account)
    await _webhook(store, account_id, webhook_id)
    return await queue.log_of(store.redis, store.prefix, account_id, webhook_id, cfg.log_cap)


async def send_test(
    store: Store, cfg: AlertsConfig, account: str, webhook_id: str
) -> dict[str, Any]:
    """Queue a delivery of rule ``test`` to one webhook (signed and logged like any other)."""
    account_id = await account_id_of(store, account)
    await _webhook(store, account_id, webhook_id)
    now = await store.now_ms()
    body = queue.event_body("test", account_id, None, 0, 0, 0, now)
    delivery_id = await queue.enqueue(
        store.redis, store.prefix, account_id, webhook_id, body, now, cfg.log_cap
    )
    return {"id": body["id"], "delivery_id": delivery_id}


async def create_rule(
    store: Store,
    cfg: AlertsConfig,
    account: str,
    rule: str,
    threshold: object,
    window_s: object = None,
) -> dict[str, Any]:
    account_id = await account_id_of(store, account)
    try:
        name, n, window = rules.checked_rule(rule, threshold, window_s)
    except rules.RuleRefused as exc:
        raise StoreError(str(exc)) from None
    record = {
        "id": queue.new_id("rule"),
        "rule": name,
        "threshold": int(n) if n.is_integer() else n,
        "window_s": window,
        "created_at": await store.now_ms(),
    }
    await _add_capped(
        store,
        ks.alert_rules(store.prefix, account_id),
        cfg.max_rules,
        record,
        f"an account has at most {cfg.max_rules} alert rules; remove one first",
    )
    await seed_readings(store.redis, store.prefix, account_id, record)
    await store.redis.sadd(ks.alert_accounts(store.prefix), account_id)
    return _rule_out(record)


async def list_rules(store: Store, account: str) -> list[dict[str, Any]]:
    account_id = await account_id_of(store, account)
    found = await rules_of(store.redis, store.prefix, account_id)
    return [_rule_out(r) for r in sorted(found.values(), key=lambda r: r["created_at"])]


async def delete_rule(store: Store, account: str, rule_id: str) -> dict[str, Any]:
    account_id = await account_id_of(store, account)
    name = ks.alert_rules(store.prefix, account_id)
    if not await store.redis.hdel(name, rule_id):
        raise NotFound(f"no alert rule {rule_id!r}")
    if not await store.redis.hlen(name):
        await store.redis.srem(ks.alert_accounts(store.prefix), account_id)
    return {"id": rule_id, "deleted": True}


# -- shared with the deliverer -------------------------------------------------------
async def webhooks_of(redis: Any, prefix: str, account_id: str) -> dict[str, dict[str, Any]]:
    raw = await redis.hgetall(ks.alert_webhooks(prefix, account_id))
    return {k: orjson.loads(v) for k, v in raw.items()}


async def rules_of(redis: Any, prefix: str, account_id: str) -> dict[str, dict[str, Any]]:
    raw = await redis.hgetall(ks.alert_rules(prefix, account_id))
    return {k: orjson.loads(v) for k, v in raw.items()}


def _rule_out(record: dict[str, Any]) -> dict[str, Any]:
    words = rules.describe(record["rule"], float(record["threshold"]), record["window_s"])
    return {**record, "description": words}


async def _webhook(store: Store, account_id: str, webhook_id: str) -> dict[str, Any]:
    raw = await store.redis.hget(ks.alert_webhooks(store.prefix, account_id), webhook_id)
    if raw is None:
        raise NotFound(f"no webhook {webhook_id!r}")
    return dict(orjson.loads(raw))


async def _add_capped(store: Store, name: str, cap: int, record: dict[str, Any], full: str) -> None:
    added = await store.redis.eval(
        ADD_CAPPED_LUA, 1, name, cap, record["id"], orjson.dumps(record).decode()
    )
    if not added:
        raise StoreError(full)
