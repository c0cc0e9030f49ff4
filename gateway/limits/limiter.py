"""The admission check: key lookup + quota + token bucket + usage, one round trip.

``RedisLimiter`` is the Python face of ``lua/admit.lua``. Over the limit is a
result (``Decision.status``), not an exception; only "Redis could not be
asked" raises, as ``LimiterUnavailable``, so the handler can apply the
fail-open / fail-closed policy in one place.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from gateway.config import PlanConfig
from gateway.redis import keyspace as ks
from gateway.redis.failurelog import FailureLog
from gateway.redis.mux import MuxRedis, RedisUnavailable

ADMIT_LUA = resources.files("gateway").joinpath("limits/admit.lua").read_text()
LEASE_LUA = resources.files("gateway").joinpath("limits/lease.lua").read_text()


class Status(IntEnum):
    ADMITTED = 0
    UNAUTHORIZED = 1
    FORBIDDEN = 2
    RATE_LIMITED = 3
    QUOTA_EXCEEDED = 4
    TOO_EXPENSIVE = 5
    KEY_RATE_CAPPED = 6  # the owner's per-key requests-per-second cap, not the plan's
    KEY_DAILY_CAPPED = 7  # the owner's per-key daily compute-unit cap


@dataclass(frozen=True, slots=True)
class Decision:
    status: Status
    key_id: str
    limit: int = 0
    remaining: int = 0
    reset_s: int = 0
    retry_ms: int = 0
    plan: str = ""


class LimiterUnavailable(Exception):
    """Redis could not answer in time; the caller applies the failure policy."""


class Limiter(Protocol):
    async def admit(
        self,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str = "",
        ip_bits: str = "",
        now_ms: int | None = None,
    ) -> Decision: ...


def record_key(prefix: str, khash: str) -> str:
    return f"{prefix}:{{{khash}}}:k"


def bucket_key(prefix: str, khash: str) -> str:
    """The hash holding a key's token bucket (fields t, ts): its record itself."""
    return record_key(prefix, khash)


def usage_prefix(prefix: str, khash: str) -> str:
    return f"{prefix}:{{{khash}}}:"


_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


@lru_cache(maxsize=4096)
def ip_bits(address: str) -> str:
    """A client IP as its family mark ('4'/'6') and 128 bits, for Lua prefix match.

    IPv4 (and IPv4-mapped IPv6) addresses are mapped into IPv6 so one
    prefix compare serves both families; the mark keeps them apart, so an
    entry ``::/0`` (just ``'6'``) matches every IPv6 client and no IPv4 one,
    as SPEC §5 asks. Anything that is not an address gives ``""``, which
    matches no IP allowlist.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return ""
    if isinstance(ip, ipaddress.IPv4Address):
        return "4" + format((0xFFFF << 32) | int(ip), "0128b")
    return ("4" if ip.ipv4_mapped is not None else "6") + format(int(ip), "0128b")


def cidr_bits(cidr: str) -> str:
    """The network prefix of a CIDR as ``ip_bits`` writes addresses: mark, then bits.

    ``0.0.0.0/0`` is ``'4'`` and 96 bits of the mapping; ``::/0`` is ``'6'``.
    An IPv6 network inside ``::ffff:0:0/96`` is an IPv4 network. Raises
    ``ValueError`` for anything that is not an IP network.
    """
    net = ipaddress.ip_network(cidr.strip(), strict=False)
    if isinstance(net, ipaddress.IPv4Network):
        return ip_bits(str(net.network_address))[: 1 + 96 + net.prefixlen]
    bits = format(int(net.network_address), "0128b")[: net.prefixlen]
    mark = "4" if net.prefixlen >= 96 and net.subnet_of(_V4_MAPPED) else "6"
    return mark + bits


class PlanTable:
    """Plans rendered once as ARGV strings; only the per-request cost varies."""

    def __init__(self, plans: Sequence[PlanConfig]) -> None:
        self._plans = tuple(plans)
        self._fixed = [(p.name, _num(p.rate), str(p.burst), str(p.daily_quota)) for p in plans]
        self._single: dict[str, list[str]] = {}

    def args(self, methods: Mapping[str, int], *, probe: bool = False) -> list[str]:
        """ARGV[5...]: plan count, the plans with this request's cost each, methods.

        ``probe``: a key check that charges nothing (see ``is_probe``).
        """
        if probe:
            return self._build(methods, floor=0)
        if len(methods) == 1:
            ((method, count),) = methods.items()
            if count == 1:
                cached = self._single.get(method)
                if cached is None:
                    cached = self._build(methods)
                    if len(self._single) < 1024:
                        self._single[method] = cached
                return cached
        return self._build(methods)

    def _build(self, methods: Mapping[str, int], floor: int = 1) -> list[str]:
        out = [str(len(self._plans))]
        for plan, fixed in zip(self._plans, self._fixed, strict=True):
            # nothing is free: a body we answer ourselves still costs one unit
            cost = max(floor, sum(plan.cost(m) * n for m, n in methods.items()))
            out.extend(fixed)
            out.append(str(cost))
        for method, count in methods.items():
            out.append(method)
            out.append(str(count))
        return out


def is_probe(calls: int, methods: Mapping[str, int]) -> bool:
    """No calls and no methods: a key check that charges nothing.

    Only the WebSocket upgrade asks this way (SPEC §9: every call and every
    notification on the socket costs units, opening it does not); an HTTP
    request always counts at least one call, so it always costs a unit.
    """
    return calls == 0 and not methods


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


class RedisScript:
    """Runs one Lua script with EVALSHA through redis-py (which reloads it on NOSCRIPT).

    The general runner: works on a single Redis and on a Cluster (redis-py
    routes by the first key; every key of one call shares one hash tag).
    "Redis could not be asked" becomes ``LimiterUnavailable``.
    """

    def __init__(self, redis: Redis | RedisCluster, lua: str, log_interval_s: float = 10.0) -> None:
        self._script = redis.register_script(lua)
        self._failed = FailureLog(log_interval_s)

    async def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        try:
            return await self._script(keys=list(keys), args=list(args))
        # RedisClusterException (no node reachable, slot not covered) is not a
        # RedisError, yet it means the same: Redis could not be asked.
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            self._failed(exc)  # the mux logs its own failures the same way
            raise LimiterUnavailable(str(exc)) from exc


class MuxScript:
    """Runs one Lua script over the multiplexed connection: the fast path for one Redis.

    All calls issued in one event-loop tick leave in one write (see
    ``gateway.redis.mux``).
    """

    def __init__(self, mux: MuxRedis, lua: str) -> None:
        self._mux = mux
        self._lua = lua
        self._sha = hashlib.sha1(lua.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        try:
            return await self._mux.evalsha(self._sha, self._lua, keys, args)
        except RedisUnavailable as exc:
            raise LimiterUnavailable(str(exc)) from exc


ScriptRunner = Callable[[Sequence[str], Sequence[str]], Awaitable[Any]]


class ExactLimiter:
    """``admit.lua`` once per request: key, allowlists, quota, bucket and usage in one call.

    ``admission.mode = "exact"``; the default is ``gateway.limits.leasing``.
    """

    def __init__(self, run: ScriptRunner, plans: Sequence[PlanConfig], prefix: str) -> None:
        self._run = run
        self._plans = PlanTable(plans)
        self._prefix = prefix

    async def admit(
        self,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str = "",
        ip_bits: str = "",
        now_ms: int | None = None,
    ) -> Decision:
        tag = ks.key_tag(self._prefix, khash)
        args = ["" if now_ms is None else str(now_ms), str(calls), origin, ip_bits]
        args.extend(self._plans.args(methods, probe=is_probe(calls, methods)))
        return decision_from_reply(await self._run((tag + "k", tag), args))


class RedisLimiter(ExactLimiter):
    """The exact limiter through redis-py (single Redis or Cluster)."""

    def __init__(
        self,
        redis: Redis | RedisCluster,
        plans: Sequence[PlanConfig],
        prefix: str = "gw",
        log_interval_s: float = 10.0,
    ) -> None:
        super().__init__(RedisScript(redis, ADMIT_LUA, log_interval_s), plans, prefix)


class MuxLimiter(ExactLimiter):
    """The exact limiter over one multiplexed connection."""

    def __init__(self, mux: MuxRedis, plans: Sequence[PlanConfig], prefix: str = "gw") -> None:
        super().__init__(MuxScript(mux, ADMIT_LUA), plans, prefix)


def decision_from_reply(res: Sequence[Any]) -> Decision:
    key_id = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
    plan = res[6].decode() if isinstance(res[6], bytes) else str(res[6])
    return Decision(
        Status(int(res[0])), key_id, int(res[2]), int(res[3]), int(res[4]), int(res[5]), plan
    )
