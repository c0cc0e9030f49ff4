"""Deliveries in Redis: each one's record, its webhook's log, and one queue by due time.

The queue is a sorted set (member ``"<account id> <delivery id>"``, score the
ms it is due), so a restart or another process carries on where one left off.
A process claims a due delivery with one script that pushes its due time a
lease ahead (``CLAIM_LUA``): another process sees it again only if the
claimer died mid-attempt. After the attempt the claimer removes it
(delivered, or given up) or sets its next due time (a retry).

A delivery's record (``alert_delivery``, JSON: body, webhook, status,
attempts, last error) is kept two days; the webhook's log lists its latest
``alerts.log_cap`` deliveries.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.redis import keyspace as ks
from gateway.store.core import DAY_MS

RECORD_TTL_MS = 2 * DAY_MS

# KEYS[1] the queue  ARGV[1] now (ms)  ARGV[2] lease (ms)
# returns the member of the earliest delivery due at ARGV[1], now leased to the
# caller until ARGV[1] + ARGV[2], or false when none is due
CLAIM_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
if #due == 0 then return false end
redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[1]) + tonumber(ARGV[2]), due[1])
return due[1]
"""


def new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"


def member(account_id: str, delivery_id: str) -> str:
    return f"{account_id} {delivery_id}"


def split_member(value: str) -> tuple[str, str]:
    account_id, _, delivery_id = value.partition(" ")
    return account_id, delivery_id


async def enqueue(
    redis: Any,
    prefix: str,
    account_id: str,
    webhook_id: str,
    body: dict[str, Any],
    now_ms: int,
    log_cap: int,
) -> str:
    """Queue ``body`` for one webhook, due now; its delivery id."""
    delivery_id = new_id("dlv")
    record = {
        "id": delivery_id,
        "webhook": webhook_id,
        "body": body,
        "status": "pending",
        "attempts": 0,
        "http_status": None,
        "last_error": "",
        "created_at": now_ms,
        "updated_at": now_ms,
        "next_at": now_ms,
    }
    log = ks.alert_log(prefix, account_id, webhook_id)
    pipe = redis.pipeline(transaction=False)
    pipe.set(
        ks.alert_delivery(prefix, account_id, delivery_id), orjson.dumps(record), px=RECORD_TTL_MS
    )
    pipe.zadd(log, {delivery_id: now_ms})
    pipe.zremrangebyrank(log, 0, -(log_cap + 1))
    pipe.pexpire(log, RECORD_TTL_MS)
    pipe.zadd(ks.alert_queue(prefix), {member(account_id, delivery_id): now_ms})
    await pipe.execute()
    return delivery_id


async def load(redis: Any, prefix: str, account_id: str, delivery_id: str) -> dict[str, Any] | None:
    raw = await redis.get(ks.alert_delivery(prefix, account_id, delivery_id))
    return None if raw is None else dict(orjson.loads(raw))


async def settle(
    redis: Any, prefix: str, account_id: str, record: dict[str, Any], due_ms: int | None
) -> None:
    """Save the record after an attempt; ``due_ms`` None takes it off the queue, else
    it is retried then (only while still queued: a removed webhook stays removed)."""
    pipe = redis.pipeline(transaction=False)
    pipe.set(
        ks.alert_delivery(prefix, account_id, record["id"]),
        orjson.dumps(record),
        px=RECORD_TTL_MS,
        xx=True,
    )
    queued = member(account_id, record["id"])
    if due_ms is None:
        pipe.zrem(ks.alert_queue(prefix), queued)
    else:
        pipe.zadd(ks.alert_queue(prefix), {queued: due_ms}, xx=True)
    await pipe.execute()


async def log_of(
    redis: Any, prefix: str, account_id: str, webhook_id: str, limit: int
) -> list[dict[str, Any]]:
    """A webhook's latest deliveries, newest first, as plain dicts (no secret in them)."""
    ids = await redis.zrevrange(ks.alert_log(prefix, account_id, webhook_id), 0, limit - 1)
    if not ids:
        return []
    pipe = redis.pipeline(transaction=False)
    for delivery_id in ids:
        pipe.get(ks.alert_delivery(prefix, account_id, delivery_id))
    out = []
    for raw in await pipe.execute():
        if raw is None:
            continue
        record = orjson.loads(raw)
        body = record.get("body", {})
        out.append(
            {
                "id": record["id"],
                "event_id": body.get("id"),
                "rule": body.get("rule"),
                "key_id": body.get("key_id"),
                "status": record["status"],
                "attempts": record["attempts"],
                "http_status": record.get("http_status"),
                "last_error": record.get("last_error", ""),
                "created_at": record["created_at"],
                "updated_at": record["updated_at"],
                "next_at": record.get("next_at") if record["status"] == "pending" else None,
            }
        )
    return out


def event_body(
    rule: str,
    account_id: str,
    key_id: str | None,
    value: float,
    threshold: float,
    window_s: int,
    at_ms: int,
) -> dict[str, Any]:
    """What a webhook receives: ``{id, rule, account, key_id, value, threshold, window_s, at}``."""
    return {
        "id": new_id("evt"),
        "rule": rule,
        "account": account_id,
        "key_id": key_id,
        "value": value,
        "threshold": threshold,
        "window_s": window_s,
        "at": _iso(at_ms),
    }


def _iso(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
    return f"{stamp}{ms % 1000:03d}Z"
