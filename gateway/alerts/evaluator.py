"""The evaluator: every ``alerts.interval_s`` each process reads the counters the hot
path already keeps and fires the rules whose condition holds.

It runs beside the hot path, on the Store's own Redis client, and adds
nothing to a call. Per tick: the accounts that have rules (one set), their
rules, webhooks and working keys (one pipeline), the keys' records and
today's and yesterday's day counters (one pipeline), one readings script per
windowed rule and key (one pipeline), then one ``SET NX PX`` per rule whose
condition holds, named after the rule, the key and the window's start: of
any number of processes and replicas exactly one wins it, and only the
winner queues the deliveries.

A windowed rule (``rate_limited``, ``error_percent``) counts from the
reading taken when its window began: the last reading of the previous
window if there is one (so calls right at the boundary count), else the
first of this window (a new rule starts counting when it is first read).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.alerts import queue, rules
from gateway.alerts.api import event_body
from gateway.config import Config
from gateway.redis import keyspace as ks
from gateway.store.core import DAY_MS

log = logging.getLogger("gateway.alerts")

COUNTERS = ("cu", "lim", "req", "err", "ans")

# KEYS[1] the rule's readings of one key  ARGV[1] window start (ms)  ARGV[2] this
# reading (JSON)  ARGV[3] now (ms)  ARGV[4] previous window's start (ms)  ARGV[5] TTL (ms)
# returns the window's baseline reading (JSON)
READINGS_LUA = """
local h = KEYS[1]
if redis.call('HGET', h, 'w') ~= ARGV[1] then
  local base = ARGV[2]
  local last_at = tonumber(redis.call('HGET', h, 'lt') or '0')
  if last_at >= tonumber(ARGV[4]) and last_at < tonumber(ARGV[1]) then
    base = redis.call('HGET', h, 'last')
  end
  redis.call('HSET', h, 'w', ARGV[1], 'b', base)
end
redis.call('HSET', h, 'last', ARGV[2], 'lt', ARGV[3])
redis.call('PEXPIRE', h, ARGV[5])
return redis.call('HGET', h, 'b')
"""


class Evaluator:
    """Evaluates every account's rules once per interval; ``fired`` is told when any fired."""

    def __init__(
        self,
        redis: Any,
        cfg: Config,
        fired: Callable[[], None] = lambda: None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._redis = redis
        self._cfg = cfg
        self._prefix = cfg.redis.prefix
        self._fired = fired
        self._clock_ms = clock_ms

    async def run(self) -> None:
        """Tick every ``alerts.interval_s`` until cancelled (a failed tick is logged)."""
        while True:
            try:
                await self.tick()
            except Exception as exc:  # Redis away, a record half-written: next tick
                log.warning("alert rules not evaluated: %s", exc)
            await asyncio.sleep(self._cfg.alerts.interval_s)

    async def tick(self) -> int:
        """Evaluate every rule of every account once; how many fired here."""
        now = self._clock_ms()
        p = self._prefix
        accounts = sorted(await self._redis.smembers(ks.alert_accounts(p)))
        if not accounts:
            return 0
        pipe = self._redis.pipeline(transaction=False)
        for account_id in accounts:
            pipe.hgetall(ks.alert_rules(p, account_id))
            pipe.hkeys(ks.alert_webhooks(p, account_id))
            pipe.zrangebyscore(ks.account_working(p, account_id), now, "+inf", withscores=True)
        replies = await pipe.execute()
        work: list[tuple[str, list[dict[str, Any]], list[str], list[tuple[str, float]]]] = []
        for i, account_id in enumerate(accounts):
            raw_rules, hooks, working = replies[3 * i : 3 * i + 3]
            if raw_rules and hooks and working:
                found = [orjson.loads(v) for v in raw_rules.values()]
                work.append((account_id, found, list(hooks), list(working)))
        keys = [(a, key_id, stops) for a, _, _, working in work for key_id, stops in working]
        if not keys:
            return 0
        facts = await self._key_facts(keys, now)
        candidates = await self._conditions(work, facts, now)
        return await self._fire(candidates, now)

    async def _key_facts(
        self, keys: list[tuple[str, str, float]], now: int
    ) -> dict[str, tuple[float, int, dict[str, dict[str, int]]]]:
        """key id -> (expiry ms or inf, daily quota or 0, reading of today and yesterday)."""
        p = self._prefix
        pipe = self._redis.pipeline(transaction=False)
        for _, key_id, _ in keys:
            pipe.get(ks.key_index(p, key_id))
        hashes = await pipe.execute()
        today = now // DAY_MS
        days = (today - 1, today)
        pipe = self._redis.pipeline(transaction=False)
        known = [(k, h) for k, h in zip(keys, hashes, strict=True) if h]
        for _, khash in known:
            pipe.hmget(ks.record_key(p, khash), "plan", "dcap")
            for day in days:
                pipe.hmget(ks.usage_day(p, khash, day), *COUNTERS)
        replies = await pipe.execute()
        facts = {}
        for i, ((_, key_id, stops), _) in enumerate(known):
            (plan, dcap), *per_day = replies[3 * i : 3 * i + 3]
            reading = {
                str(day): {c: int(v or 0) for c, v in zip(COUNTERS, values, strict=True)}
                for day, values in zip(days, per_day, strict=True)
            }
            facts[key_id] = (float(stops), self._quota(plan, dcap), reading)
        return facts

    def _quota(self, plan: str | None, dcap: str | None) -> int:
        try:
            quota = self._cfg.plan(plan or "").daily_quota
        except KeyError:
            quota = 0
        cap = int(dcap) if dcap and dcap.isdigit() else 0
        return min(q for q in (quota, cap) if q) if quota or cap else 0

    async def _conditions(
        self,
        work: list[tuple[str, list[dict[str, Any]], list[str], list[tuple[str, float]]]],
        facts: dict[str, tuple[float, int, dict[str, dict[str, int]]]],
        now: int,
    ) -> list[tuple[str, list[str], dict[str, Any], str, float, int]]:
        """(account, webhooks, rule, key id, value, window start) of each condition that holds."""
        pairs = [
            (account_id, hooks, rule, key_id)
            for account_id, found, hooks, working in work
            for rule in found
            for key_id, _ in working
            if key_id in facts and rule.get("rule") in rules.RULES
        ]
        bases: list[Any] = []
        windowed = [pair for pair in pairs if rules.RULES[pair[2]["rule"]].windowed]
        if windowed:
            pipe = self._redis.pipeline(transaction=False)
            for _, _, rule, key_id in windowed:
                span = rule["window_s"] * 1000
                start = rules.window_start(rule["rule"], rule["window_s"], now, math.inf)
                # EVAL, not EVALSHA: a Cluster pipeline loads no scripts (off the hot path)
                pipe.eval(
                    READINGS_LUA,
                    1,
                    ks.alert_readings(self._prefix, rule["id"], key_id),
                    start,
                    orjson.dumps(facts[key_id][2]),
                    now,
                    start - span,
                    3 * span,
                )
            bases = list(await pipe.execute())
        base_of = {
            (rule["id"], key_id): orjson.loads(b)
            for (_, _, rule, key_id), b in zip(windowed, bases, strict=True)
        }
        out = []
        for account_id, hooks, rule, key_id in pairs:
            stops, quota, reading = facts[key_id]
            name = rule["rule"]
            value = rules.value_of(
                name,
                now_ms=now,
                expires_ms=stops,
                quota=quota,
                today=reading[str(now // DAY_MS)],
                now=reading,
                base=base_of.get((rule["id"], key_id), reading),
                min_calls=self._cfg.alerts.error_min_calls,
            )
            if value is not None and rules.fires(name, value, float(rule["threshold"])):
                start = rules.window_start(name, rule["window_s"], now, stops)
                out.append((account_id, hooks, rule, key_id, value, start))
        return out

    async def _fire(
        self, candidates: list[tuple[str, list[str], dict[str, Any], str, float, int]], now: int
    ) -> int:
        if not candidates:
            return 0
        p = self._prefix
        pipe = self._redis.pipeline(transaction=False)
        for _, _, rule, key_id, _, start in candidates:
            # kept a window past its start (a key's expiry: until a day after it)
            ttl = max(rule["window_s"] * 1000 * 2, start - now + DAY_MS)
            pipe.set(ks.alert_fired(p, rule["id"], key_id, start), now, nx=True, px=ttl)
        won = await pipe.execute()
        fired = 0
        for (account_id, hooks, rule, key_id, value, _), ok in zip(candidates, won, strict=True):
            if not ok:
                continue
            fired += 1
            body = event_body(
                rule["rule"], account_id, key_id, value, rule["threshold"], rule["window_s"], now
            )
            for webhook_id in hooks:
                await queue.enqueue(
                    self._redis, p, account_id, webhook_id, body, now, self._cfg.alerts.log_cap
                )
            log.info("alert fired rule=%s key_id=%s value=%s", rule["rule"], key_id, value)
        if fired:
            self._fired()
        return fired
