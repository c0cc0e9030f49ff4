"""Leased admission: most requests are admitted without asking Redis.

The exact per-request script (``admit.lua``) costs one Redis round trip and
about 23 µs of Redis CPU per request, which caps one Redis near 40k req/s
however many gateways run. Here each worker process keeps, per API key:

* the key's record (state, expiry, plan, allowlists), cached until a
  pub/sub message on ``<prefix>:keys`` says it changed (revoke, rotate,
  plan switch, limits), or ``key_ttl_s`` passes as a safety net;
* a lease: units of the key's token bucket already deducted from the shared
  bucket in Redis by ``lease.lua``. Requests spend the lease locally; when
  it runs out the next request asks Redis for its cost plus a slice sized
  from this process's recent rate of that key (``lease_horizon_s`` of
  traffic, at most ``max_slice``). Unused units go back after
  ``lease_idle_s``.

Why it stays exact: units are taken from the shared bucket before they are
spent, so the processes together never admit more than ``burst + rate·t``;
and the script grants a slice only from what is left above a quarter of
the bucket, so a key at its limit is served one call per round trip, as
before, and what sits unused in leases is bounded by a fraction of the
bucket that drains back within ``lease_idle_s``.

A refusal is remembered until its retry time with the cost refused (a key over
its limit costs no round trip per request either): only a call at least that
dear is refused from memory, so a cheaper one that fits still gets its units.

It stays whole because the lease, the cached key record and the remembered
refusal are one per-key entry (``_Key``) that every admission reads and writes
in one step, and the exactness argument above covers all three.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.config import PlanConfig
from gateway.limits.allowlists import NO_ALLOWLISTS, Allowlists
from gateway.limits.limiter import REASKED, Decision, LimiterUnavailable, ScriptRunner, Status
from gateway.limits.plantable import PlanTable, call_costs, is_probe, request_cost
from gateway.redis import keyspace as ks
from gateway.redis.flushing import flush_every

log = logging.getLogger("gateway.limiter")


class UsageCounter(Protocol):
    """Where admitted and refused requests are counted (``store.usagesink.UsageSink``)."""

    def admitted(self, khash: str, calls: int, methods: Mapping[str, int]) -> None: ...

    def count(self, khash: str, field: str, n: int = 1) -> None: ...


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    key_ttl_s: float = 5.0  # a cached record is re-read at least this often
    lease_horizon_s: float = 0.05  # a slice covers this much of the key's recent rate
    max_slice: int = 1000  # units one lease may add beyond the request's cost
    lease_idle_s: float = 0.25  # unused units go back after this long without use


@dataclass(slots=True)
class _Key:
    """What this process knows about one API key."""

    key_id: str = ""
    plan: PlanConfig | None = None
    weights: dict[str, int] | None = None  # the plan's, as a plain dict; None until read
    exp_ms: int = 0
    allow: Allowlists = NO_ALLOWLISTS
    open: bool = True  # no allowlists: nothing to check per request
    burst: int = 0  # the bucket's size for this key (plan, narrowed by the key's cap)
    rate: float = 0.0  # refill per second (likewise)
    loaded: float = 0.0  # monotonic time the record was read
    tokens: int = 0  # leased units not yet spent
    used: float = 0.0  # monotonic time of the last local admission
    refused_until: float = 0.0
    refused: Status = Status.RATE_LIMITED
    refused_cost: int = 0  # the cost refused until then; a cheaper call asks again
    remaining: int = 0  # the shared bucket's units left at the last ask
    asked: float = 0.0  # monotonic time of that ask
    rate_window: float = 0.0
    rate_count: int = 0
    recent: float = 0.0  # this process's recent requests/s for the key
    last: Decision | None = None  # the last admitted decision, reused while it holds


class LeaseLimiter:
    """``Limiter`` that admits from per-process leases of the shared bucket."""

    def __init__(
        self,
        run: ScriptRunner,
        plans: Sequence[PlanConfig],
        prefix: str,
        usage: UsageCounter,
        settings: LeaseSettings = LeaseSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] | None = None,
    ) -> None:
        self._run = run
        self._plans = {p.name: p for p in plans}
        table = PlanTable(plans)
        self._plan_args = table.groups
        self._call_args = table.call_groups
        # plain dicts: a read-only mapping's ``get`` costs several times a dict's
        self._weights = {p.name: dict(p.weights) for p in plans}
        self._prefix = prefix
        self._usage = usage
        self._s = settings
        self._clock = clock
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        # the give-back's ``now`` for lease.lua: an injected clock's, else Redis TIME
        self._script_ms = wall_ms
        self._keys: dict[str, _Key] = {}

    # -- the hot path ------------------------------------------------------------
    async def admit(
        self,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str = "",
        ip_bits: str = "",
        now_ms: int | None = None,
        per_call: Sequence[str] = (),
        *,
        gate: bool = True,
    ) -> Decision:
        """Admit from the lease when it holds the cost; otherwise ask ``lease.lua``.

        A batch admitted call by call (``per_call``) that the lease holds whole
        is admitted here; otherwise ``lease.lua`` walks its calls against the
        shared bucket (this lease given back first), as ``admit.lua`` does.

        The local path is written out here rather than split into helpers: it
        runs for nearly every request, and each call, ``Decision`` or float
        division saved shows (``python -m bench.micro.admission`` measures it).
        """
        # an injected time (tests) drives the local clock too, as it drives the script's
        now = self._clock() if now_ms is None else now_ms / 1000
        key = self._keys.get(khash)
        if key is None or key.weights is None or now - key.loaded > self._s.key_ttl_s:
            return await self._ask(
                khash,
                key,
                calls,
                methods,
                origin,
                ip_bits,
                now_ms,
                cold=True,
                cost=0 if is_probe(calls, methods) else -1,
                gate=gate,
                per_call=per_call,
            )
        if key.exp_ms and (now_ms or self._wall_ms()) >= key.exp_ms:
            self._keys.pop(khash, None)
            return Decision(Status.UNAUTHORIZED, key.key_id)
        if gate and not key.open and not key.allow.allows(methods, origin, ip_bits):
            self._usage.count(khash, "den")
            denied = key.allow.refusal(methods, origin, ip_bits)
            return Decision(Status.FORBIDDEN, key.key_id, denied=denied)
        if calls == 0 and not methods:  # a probe (limiter.is_probe) costs nothing
            cost = 0
        else:
            weights = key.weights
            cost = 0
            for method, n in methods.items():
                units = weights.get(method)
                if units is None:  # a weight by pattern (``debug_trace*``), or the default 1
                    assert key.plan is not None  # set with ``weights``
                    units = key.plan.cost(method)
                cost += units * n
            if cost < 1:
                cost = 1
        key.rate_count += 1  # the rate itself is worked out when a slice is sized
        if len(per_call) > 1 and (key.tokens < cost or cost > key.burst):
            return await self._ask(
                khash, key, calls, methods, origin, ip_bits, now_ms, cost=cost, per_call=per_call
            )
        if cost > key.burst:
            self._usage.count(khash, "lim", calls)
            return self._decision(Status.TOO_EXPENSIVE, key, 0, now)
        if key.tokens >= cost:
            key.tokens -= cost
            key.used = now
            self._usage.admitted(khash, calls, methods)
            return self._admitted(key, now)
        if now < key.refused_until and cost >= key.refused_cost:
            self._usage.count(khash, "lim", 0 if REASKED.get() else calls)
            retry = max(1, int((key.refused_until - now) * 1000))
            return self._decision(key.refused, key, retry, now)
        return await self._ask(khash, key, calls, methods, origin, ip_bits, now_ms, cost=cost)

    async def charge(
        self, khash: str, methods: Mapping[str, int], now_ms: int | None = None
    ) -> Decision:
        """``Limiter.charge``: ``admit`` with no calls and no allowlist (``gate=False``)."""
        return await self.admit(khash, 0, methods, now_ms=now_ms, gate=False)

    def _admitted(self, key: _Key, now: float) -> Decision:
        """The admitted ``Decision``, reused while the figures it shows are unchanged.

        A key whose bucket refills faster than it is spent shows a full
        bucket call after call, so it gets one object per lease rather than
        one per request; near its limit every call shows a new figure.
        """
        last = key.last
        if last is not None and last.remaining == _remaining(key, now):
            return last
        key.last = last = self._decision(Status.ADMITTED, key, 0, now)
        return last

    def _slice(self, key: _Key, now: float) -> int:
        """Units to ask beyond the cost: ``lease_horizon_s`` of this process's recent rate.

        The rate is an average over the requests counted since the last
        estimate (at least ``lease_horizon_s`` apart), smoothed with the one
        before; it is worked out here, once per round trip, not per request.
        """
        elapsed = now - key.rate_window
        if elapsed >= self._s.lease_horizon_s:
            current = key.rate_count / elapsed if elapsed < 1.0 else 0.0
            key.recent = current if key.recent == 0.0 else 0.5 * key.recent + 0.5 * current
            key.rate_window, key.rate_count = now, 0
        return min(self._s.max_slice, int(key.recent * self._s.lease_horizon_s))

    async def _ask(
        self,
        khash: str,
        key: _Key | None,
        calls: int,
        methods: Mapping[str, int],
        origin: str,
        ip_bits: str,
        now_ms: int | None,
        *,
        cold: bool = False,
        cost: int = -1,
        gate: bool = True,
        per_call: Sequence[str] = (),
    ) -> Decision:
        """One ``lease.lua`` call: the cost in hand plus a slice, record if cold."""
        before = self._clock() if now_ms is None else now_ms / 1000
        back = 0
        by_call = len(per_call) > 1
        if key is not None and key.tokens and (cold or by_call or cost > key.tokens):
            back, key.tokens = key.tokens, 0
        keys = (ks.record_key(self._prefix, khash), ks.key_tag(self._prefix, khash))
        cost_arg = str(cost)
        if by_call and not cold and key is not None and key.plan is not None:
            cost_arg = call_costs(key.plan.cost, per_call)
        args = [
            "" if now_ms is None else str(now_ms),
            "1" if cold else "0",
            cost_arg,
            str(self._slice(key, before) if key is not None else 0),
            str(back),
        ]
        args.extend(self._call_args(per_call) if by_call else self._plan_args(calls, methods))
        try:
            res = await self._run(keys, args)
        except LimiterUnavailable:
            if key is not None:
                key.tokens += back
            raise
        now = self._clock() if now_ms is None else now_ms / 1000
        status = Status(int(res[0]))
        if status is Status.UNAUTHORIZED:
            self._keys.pop(khash, None)
            return Decision(Status.UNAUTHORIZED, _text(res[7]) if len(res) > 7 else "")
        if key is None:
            key = self._keys.setdefault(khash, _Key())
        plan = self._plans.get(_text(res[4])) or next(iter(self._plans.values()))
        if cold:
            key.key_id = _text(res[7])
            key.exp_ms = int(res[8] or 0)
            key.allow = Allowlists.parse(_split(res[10]), _split(res[11]), _split(res[12]))
            key.open = key.allow.empty
            key.loaded = now
        if key.plan is not plan:
            key.plan, key.weights = plan, self._weights[plan.name]
        key.last = None  # burst, rate or remaining may have changed
        key.burst = int(res[5])
        key.rate = int(res[6]) / 1000
        key.remaining = int(res[2])
        key.asked = now
        granted = int(res[1])
        if cold:
            # the record was unknown when we asked: judge this request now
            if gate and not (key.open or key.allow.allows(methods, origin, ip_bits)):
                key.tokens += granted  # nothing spent: the units go back later
                self._usage.count(khash, "den")
                denied = key.allow.refusal(methods, origin, ip_bits)
                return Decision(Status.FORBIDDEN, key.key_id, denied=denied)
            key.rate_count += 1
        retry_ms = int(res[3])
        if by_call:
            return self._by_call(khash, key, plan, status, granted, retry_ms, calls, per_call, res)
        if status is Status.ADMITTED:
            cost_now = request_cost(plan, calls, methods)
            key.tokens += granted - cost_now
            key.used = now
            key.refused_until = 0.0
            self._usage.admitted(khash, calls, methods)
            return self._admitted(key, now)
        if status is not Status.TOO_EXPENSIVE:
            key.refused_until = now + retry_ms / 1000
            key.refused = status
            key.refused_cost = cost if cost > 0 else max(1, request_cost(plan, calls, methods))
        self._usage.count(khash, "lim", 0 if REASKED.get() else calls)
        return self._decision(status, key, retry_ms, now)

    def _by_call(
        self,
        khash: str,
        key: _Key,
        plan: PlanConfig,
        status: Status,
        granted: int,
        retry_ms: int,
        calls: int,
        per_call: Sequence[str],
        res: Sequence[Any],
    ) -> Decision:
        """A batch ``lease.lua`` walked call by call: keep the slice, count, decide.

        No refusal is remembered (``refused_until``): the next request is
        judged by its own cost, as ``admit.lua`` judges it.
        """
        now = key.asked
        mask = _text(res[-1])
        units = [int(u) for u in call_costs(plan.cost, per_call).split(",")]
        spent = sum(u for u, s in zip(units, mask, strict=True) if s == "0")
        refused = len(mask) - mask.count("0")
        if status is Status.ADMITTED:
            key.tokens += granted - spent
            key.used = now
            admitted: dict[str, int] = {}
            for method, s in zip(per_call, mask, strict=True):
                if s == "0":
                    admitted[method] = admitted.get(method, 0) + 1
            self._usage.admitted(khash, calls - refused, admitted)
        if refused and not REASKED.get():  # a wait's second ask: counted at its first
            self._usage.count(khash, "lim", refused if status is Status.ADMITTED else calls)
        key.last = None
        decision = self._decision(status, key, retry_ms, now)
        return Decision(
            decision.status,
            decision.key_id,
            decision.limit,
            decision.remaining,
            decision.reset_s,
            retry_ms,
            decision.plan,
            mask,
        )

    @staticmethod
    def _decision(status: Status, key: _Key, retry_ms: int, now: float) -> Decision:
        plan = key.plan
        assert plan is not None
        burst = key.burst or plan.burst
        remaining = _remaining(key, now)
        reset_s = math.ceil((burst - remaining) / (key.rate or plan.rate or 1))
        return Decision(status, key.key_id, burst, remaining, reset_s, retry_ms, plan.name)

    # -- background --------------------------------------------------------------
    def invalidate(self, khash: str | None = None) -> None:
        """Forget one key (or all): its next request reads the record again.

        Leased units stay with the entry and go back with that next call.
        """
        keys = self._keys.values() if khash is None else filter(None, [self._keys.get(khash)])
        for key in keys:
            key.loaded = -1e18

    async def give_back_idle(self, *, everything: bool = False) -> int:
        """Return units of leases idle for ``lease_idle_s`` (or all); how many went back."""
        now = self._clock()
        idle = [
            (khash, key)
            for khash, key in self._keys.items()
            if key.tokens and (everything or now - key.used >= self._s.lease_idle_s)
        ]
        results = await asyncio.gather(
            *(self._return(khash, key) for khash, key in idle), return_exceptions=True
        )
        stale = [
            khash
            for khash, key in self._keys.items()
            if not key.tokens and now - key.used > 10 * self._s.key_ttl_s
        ]
        for khash in stale:  # bounded memory: forget keys not seen for a while
            del self._keys[khash]
        return sum(r for r in results if isinstance(r, int))

    async def _return(self, khash: str, key: _Key) -> int:
        back, key.tokens = key.tokens, 0
        keys = (ks.record_key(self._prefix, khash), ks.key_tag(self._prefix, khash))
        now_ms = "" if self._script_ms is None else str(self._script_ms())
        args = [now_ms, "0", "0", "0", str(back), *self._plan_args(0, {})]
        try:
            await self._run(keys, args)
        except LimiterUnavailable:
            key.tokens += back
            return 0
        return back

    async def run(self, interval_s: float = 0.1) -> None:
        """Give idle leases back every ``interval_s``; on the way out, every lease."""
        await flush_every(interval_s, self._give_back)

    async def _give_back(self) -> None:
        task = asyncio.current_task()
        closing = task is not None and task.cancelling() > 0  # shutdown: return all units
        with contextlib.suppress(LimiterUnavailable):
            await self.give_back_idle(everything=closing)


def _remaining(key: _Key, now: float) -> int:
    """What the RateLimit header shows: the shared bucket as of the last ask, refilled
    since at the key's rate, plus the units leased here and not yet spent.

    Other processes' spending since that ask is unknown here, as it always
    is with leases; the figure is at most the bucket's size.
    """
    burst = key.burst or (key.plan.burst if key.plan is not None else 0)
    remaining = key.remaining + key.tokens
    if now > key.asked:
        remaining += int(key.rate * (now - key.asked))
    return burst if remaining > burst else (remaining if remaining > 0 else 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _split(value: Any) -> tuple[str, ...]:
    return tuple(v for v in _text(value).split("\n") if v)
