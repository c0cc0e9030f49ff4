"""The evaluator: every ``alerts.interval_s`` each process reads the counters the hot
path already keeps and fires the rules whose condition holds.

It runs beside the hot path, on the Store's own Redis client, and adds
nothing to a call. Per tick: the accounts that have rules (one set), the
buckets of them this process claims for this interval (one pipeline; see
``Evaluator.tick``), then per ten accounts their rules, webhooks and working
keys (one pipeline), the keys' records and today's and yesterday's day
counters (one pipeline), one readings script per windowed rule and key (one
pipeline), and one ``SET NX PX`` per rule whose condition holds, named after
the rule, the key and the window's start: of any number of processes and
replicas exactly one wins it, and only the winner queues the deliveries.

A windowed rule (``rate_limited``, ``error_percent``) counts from the
reading taken when its window began: the last reading of the previous
window if there is one (so calls right at the boundary count). A rule's
first readings are taken when it is made (``seed_readings``); a key made
after the rule counts from zero.

It stays whole because a tick is one sequence of pipelines whose answers feed
the next: split, each part would need the tick's whole state.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.alerts import queue, rules
from gateway.config import Config
from gateway.redis import keyspace as ks
from gateway.store.core import DAY_MS

log = logging.getLogger("gateway.alerts")

COUNTERS = ("cu", "lim", "req", "err", "ans")
NO_READING = b"{}"  # the baseline of a key made after its rule: every count is new
BUCKETS = 64  # the accounts' share-out between processes (claimed per interval)
CHUNK = 10  # accounts read per round of pipelines

# KEYS[1] the rule's readings of one key  ARGV[1] window start (ms)  ARGV[2] this
# reading (JSON)  ARGV[3] now (ms)  ARGV[4] previous window's start (ms)  ARGV[5] TTL
# (ms)  ARGV[6] the baseline if the key was never read for this rule (JSON)
# returns the window's baseline reading (JSON)
READINGS_LUA = """
local h = KEYS[1]
if redis.call('HGET', h, 'w') ~= ARGV[1] then
  local base = ARGV[2]
  local last_at = redis.call('HGET', h, 'lt')
  if not last_at then
    base = ARGV[6]
  elseif tonumber(last_at) >= tonumber(ARGV[4]) and tonumber(last_at) < tonumber(ARGV[1]) then
    base = redis.call('HGET', h, 'last')
  end
  redis.call('HSET', h, 'w', ARGV[1], 'b', base)
end
redis.call('HSET', h, 'last', ARGV[2], 'lt', ARGV[3])
redis.call('PEXPIRE', h, ARGV[5])
return redis.call('HGET', h, 'b')
"""


@dataclass(frozen=True, slots=True)
class KeyFacts:
    stops: float  # ms the key stops working (inf: no end)
    plan: str
    daily_cap: int  # the owner's daily unit cap, 0: the plan's
    created_at: int
    reading: dict[str, dict[str, int]]  # today's and yesterday's counters, by day


async def key_facts(
    redis: Any, prefix: str, keys: list[tuple[str, float]], now: int
) -> dict[str, KeyFacts]:
    """(key id, stops) -> what the rules read of each key: two pipelines."""
    pipe = redis.pipeline(transaction=False)
    for key_id, _ in keys:
        pipe.get(ks.key_index(prefix, key_id))
    hashes = await pipe.execute()
    known = [(k, h) for k, h in zip(keys, hashes, strict=True) if h]
    if not known:
        return {}
    today = now // DAY_MS
    days = (today - 1, today)
    pipe = redis.pipeline(transaction=False)
    for _, khash in known:
        pipe.hmget(ks.record_key(prefix, khash), "plan", "dcap", "created")
        for day in days:
            pipe.hmget(ks.usage_day(prefix, khash, day), *COUNTERS)
    replies = await pipe.execute()
    facts = {}
    for i, ((key_id, stops), _) in enumerate(known):
        (plan, dcap, created), *per_day = replies[3 * i : 3 * i + 3]
        reading = {
            str(day): {c: int(v or 0) for c, v in zip(COUNTERS, values, strict=True)}
            for day, values in zip(days, per_day, strict=True)
        }
        facts[key_id] = KeyFacts(
            float(stops),
            plan or "",
            int(dcap) if dcap and dcap.isdigit() else 0,
            int(created) if created and created.isdigit() else 0,
            reading,
        )
    return facts


async def record_readings(
    redis: Any, prefix: str, pairs: list[tuple[dict[str, Any], str, KeyFacts]], now: int
) -> list[dict[str, dict[str, int]]]:
    """Store each (windowed rule, key id, facts) reading; each one's window baseline."""
    if not pairs:
        return []
    pipe = redis.pipeline(transaction=False)
    for rule, key_id, facts in pairs:
        span = rule["window_s"] * 1000
        start = rules.window_start(rule["rule"], rule["window_s"], now, math.inf)
        reading = orjson.dumps(facts.reading)
        fresh = facts.created_at >= int(rule.get("created_at", 0))
        # EVAL, not EVALSHA: a Cluster pipeline loads no scripts (off the hot path)
        pipe.eval(
            READINGS_LUA,
            1,
            ks.alert_readings(prefix, rule["id"], key_id),
            start,
            reading,
            now,
            start - span,
            3 * span,
            NO_READING if fresh else reading,
        )
    return [orjson.loads(b) for b in await pipe.execute()]


async def seed_readings(redis: Any, prefix: str, account_id: str, rule: dict[str, Any]) -> None:
    """A new windowed rule's first readings of the account's working keys, so it counts
    from the moment it was made."""
    if not rules.RULES[rule["rule"]].windowed:
        return
    now = int(rule["created_at"])
    working = await redis.zrangebyscore(
        ks.account_working(prefix, account_id), now, "+inf", withscores=True
    )
    facts = await key_facts(redis, prefix, list(working), now)
    seeded = {**rule, "created_at": now + 1}  # keys made before now: read, not from zero
    await record_readings(redis, prefix, [(seeded, k, f) for k, f in facts.items()], now)


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
        """Tick every ``alerts.interval_s`` until cancelled (a failed tick is logged).

        A cancellation that lands inside a redis-py command can be swallowed
        there (gateway.redis.flushing says how), so the loop also ends when
        its task is being cancelled.
        """
        task = asyncio.current_task()
        while task is None or not task.cancelling():
            try:
                await self.tick()
            except Exception as exc:  # Redis away, a record half-written: next tick
                log.warning("alert rules not evaluated: %s", exc)
            if task is not None and task.cancelling():
                return
            await asyncio.sleep(self._cfg.alerts.interval_s)

    async def tick(self) -> int:
        """Evaluate the accounts this process claims for this interval; how many fired here.

        The accounts fall in ``BUCKETS`` fixed buckets (by a hash of their id);
        each interval, the first process to reach a bucket claims it (``SET NX``)
        and evaluates it, so the work is shared by every process and replica,
        not repeated by each. A bucket's accounts are read ``CHUNK`` at a time,
        yielding to the event loop in between, so a tick never holds the loop
        for long.
        """
        now = self._clock_ms()
        p = self._prefix
        accounts = await self._redis.smembers(ks.alert_accounts(p))
        if not accounts:
            return 0
        buckets: dict[int, list[str]] = {}
        for account_id in sorted(accounts):
            buckets.setdefault(zlib.crc32(account_id.encode()) % BUCKETS, []).append(account_id)
        span = max(1, int(self._cfg.alerts.interval_s * 1000))
        period = now // span
        pipe = self._redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.set(ks.alert_tick(p, bucket, period), 1, nx=True, px=2 * span)
        won = await pipe.execute()
        mine = [a for bucket, ok in zip(buckets, won, strict=True) if ok for a in buckets[bucket]]
        fired = 0
        for i in range(0, len(mine), CHUNK):
            fired += await self._evaluate(mine[i : i + CHUNK])
            await asyncio.sleep(0)
        if fired:
            self._fired()
        return fired

    async def _evaluate(self, accounts: list[str]) -> int:
        """Evaluate every rule of ``accounts``; how many fired."""
        now = self._clock_ms()
        p = self._prefix
        pipe = self._redis.pipeline(transaction=False)
        for account_id in accounts:
            pipe.hgetall(ks.alert_rules(p, account_id))
            pipe.hkeys(ks.alert_webhooks(p, account_id))
            pipe.zrangebyscore(ks.account_working(p, account_id), now, "+inf", withscores=True)
        replies = await pipe.execute()
        work: list[_Account] = []
        for i, account_id in enumerate(accounts):
            raw_rules, hooks, working = replies[3 * i : 3 * i + 3]
            if raw_rules and hooks and working:
                found = [orjson.loads(v) for v in raw_rules.values()]
                work.append((account_id, found, list(hooks), list(working)))
        keys = [(key_id, stops) for _, _, _, working in work for key_id, stops in working]
        if not keys:
            return 0
        facts = await key_facts(self._redis, p, keys, now)
        candidates = await self._conditions(work, facts, now)
        return await self._fire(candidates, now)

    def _quota(self, facts: KeyFacts) -> int:
        try:
            quota = self._cfg.plan(facts.plan).daily_quota
        except KeyError:
            quota = 0
        caps = [q for q in (quota, facts.daily_cap) if q]
        return min(caps) if caps else 0

    async def _conditions(
        self, work: list[_Account], facts: dict[str, KeyFacts], now: int
    ) -> list[_Fired]:
        """(account, webhooks, rule, key id, value, window start) of each condition that holds."""
        pairs = [
            (account_id, hooks, rule, key_id)
            for account_id, found, hooks, working in work
            for rule in found
            for key_id, _ in working
            if key_id in facts and rule.get("rule") in rules.RULES
        ]
        windowed = [pair for pair in pairs if rules.RULES[pair[2]["rule"]].windowed]
        bases = await record_readings(
            self._redis, self._prefix, [(r, k, facts[k]) for _, _, r, k in windowed], now
        )
        base_of = {
            (rule["id"], key_id): base
            for (_, _, rule, key_id), base in zip(windowed, bases, strict=True)
        }
        out = []
        for account_id, hooks, rule, key_id in pairs:
            key = facts[key_id]
            name = rule["rule"]
            value = rules.value_of(
                name,
                now_ms=now,
                expires_ms=key.stops,
                quota=self._quota(key),
                today=key.reading[str(now // DAY_MS)],
                now=key.reading,
                base=base_of.get((rule["id"], key_id), key.reading),
                min_calls=self._cfg.alerts.error_min_calls,
            )
            if value is not None and rules.fires(name, value, float(rule["threshold"])):
                start = rules.window_start(name, rule["window_s"], now, key.stops)
                out.append((account_id, hooks, rule, key_id, value, start))
        return out

    async def _fire(self, candidates: list[_Fired], now: int) -> int:
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
            body = queue.event_body(
                rule["rule"], account_id, key_id, value, rule["threshold"], rule["window_s"], now
            )
            for webhook_id in hooks:
                await queue.enqueue(
                    self._redis, p, account_id, webhook_id, body, now, self._cfg.alerts.log_cap
                )
            log.info("alert fired rule=%s key_id=%s value=%s", rule["rule"], key_id, value)
        return fired


# (account id, its rules, its webhook ids, its working keys (id, stops ms))
_Account = tuple[str, list[dict[str, Any]], list[str], list[tuple[str, float]]]
# (account id, webhook ids, rule, key id, value, window start ms)
_Fired = tuple[str, list[str], dict[str, Any], str, float, int]
