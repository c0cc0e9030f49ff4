"""The admission interface and its exact implementation: one ``admit.lua`` call per request.

``Limiter`` is what the pipeline and the WebSocket service ask; ``ExactLimiter``
(``admission.mode = "exact"``) and ``gateway.limits.leasing.LeaseLimiter``
(the default) implement it. Over the limit is a result (``Decision.status``),
not an exception; only "Redis could not be asked" raises, as
``LimiterUnavailable``, so the caller applies the fail-open / fail-closed
policy in one place. The Lua block both scripts share is included at load
time (``load_lua``); their ARGV plan groups come from ``limits.plantable``.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from gateway.config import PlanConfig
from gateway.limits.plantable import PlanTable
from gateway.redis import keyspace as ks
from gateway.redis.failurelog import FailureLog
from gateway.redis.mux import MuxRedis, RedisUnavailable

_INCLUDE = "--#include "


def load_lua(name: str) -> str:
    """A script of this package, each ``--#include <file>`` line replaced by that file.

    The shared block (``keyrecord.lua``) is text pasted in before the script
    is registered: Redis scripts cannot call each other, and one EVALSHA per
    decision is the point of the scripts.
    """
    here = resources.files("gateway").joinpath("limits")
    lines = []
    for line in here.joinpath(name).read_text().splitlines(keepends=True):
        if line.startswith(_INCLUDE):
            line = here.joinpath(line[len(_INCLUDE) :].strip()).read_text()
        lines.append(line)
    return "".join(lines)


ADMIT_LUA = load_lua("admit.lua")
LEASE_LUA = load_lua("lease.lua")


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
    # A batch admitted call by call (``per_call``): one status digit per call
    # in that order, "0" admitted; empty for a request judged whole.
    calls: str = ""
    # An allowlist refusal (FORBIDDEN): the list that refused, "origin", "ip" or
    # "method:<name>", so the 403 can say which.
    denied: str = ""

    def refused_calls(self) -> int:
        """How many calls of a batch admitted call by call were refused."""
        calls = self.calls
        return len(calls) - calls.count("0") if calls else 0


# True while ``rpc.waiting`` asks again about calls that waited for the bucket: a
# refusal then is not counted as rate-limited again (their first ask counted it).
# A context variable: each request is its own task, and the flag is its own.
REASKED: ContextVar[bool] = ContextVar("reasked", default=False)


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
        per_call: Sequence[str] = (),
    ) -> Decision:
        """A client's request: key state, allowlists, quota and bucket; usage counted.

        ``per_call``: a batch's validated calls' methods in order (two or
        more): the batch is admitted call by call, the calls the bucket holds
        units for go through and the rest are refused (``Decision.calls``);
        ``methods`` still counts them all.
        """
        ...

    async def charge(
        self, khash: str, methods: Mapping[str, int], now_ms: int | None = None
    ) -> Decision:
        """Units the gateway delivered on the key's behalf (WebSocket notifications).

        Key state, daily quota and bucket are checked and the units counted as
        usage by method, as for ``admit``; the allowlists are not consulted:
        they judge what a client may ask (the subscription was judged when it
        was asked for), and metering must not depend on them. No request is
        counted (``calls`` is 0).
        """
        ...


_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


@lru_cache(maxsize=4096)
def ip_bits(address: str) -> str:
    """A client IP as its family mark ('4'/'6') and 128 bits, for Lua prefix match.

    IPv4 (and IPv4-mapped IPv6) addresses are mapped into IPv6 so one
    prefix compare serves both families; the mark keeps them apart, so an
    entry ``::/0`` (just ``'6'``) matches every IPv6 client and no IPv4 one,
    as the allowlist rules ask. Anything that is not an address gives ``""``, which
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


class RedisScript:
    """Runs one Lua script with EVALSHA through redis-py (which reloads it on NOSCRIPT).

    The general runner: works on a single Redis and on a Cluster (redis-py
    routes by the first key; every key of one call shares one hash tag).
    "Redis could not be asked" becomes ``LimiterUnavailable``.
    """

    def __init__(
        self,
        redis: Redis | RedisCluster,
        lua: str,
        log_interval_s: float = 10.0,
        address: str = "",
    ) -> None:
        self._script = redis.register_script(lua)
        self._failed = FailureLog(log_interval_s, address)  # the address redacted
        self._down = False  # a failure was seen: the next success logs the recovery

    async def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        try:
            result = await self._script(keys=list(keys), args=list(args))
        # RedisClusterException (no node reachable, slot not covered) is not a
        # RedisError, yet it means the same: Redis could not be asked.
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            self._down = True
            self._failed(exc)  # the mux logs its own failures the same way
            raise LimiterUnavailable(str(exc)) from exc
        if self._down:
            self._down = False
            self._failed.ok()
        return result


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
    ``run`` is a ``RedisScript`` (redis-py: one Redis or a Cluster) or a
    ``MuxScript`` (the multiplexed connection) over ``ADMIT_LUA``.
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
        per_call: Sequence[str] = (),
    ) -> Decision:
        flag = "q" if REASKED.get() else ""  # admit.lua's ARGV[5]
        return await self._call(khash, calls, methods, origin, ip_bits, flag, now_ms, per_call)

    async def charge(
        self, khash: str, methods: Mapping[str, int], now_ms: int | None = None
    ) -> Decision:
        return await self._call(khash, 0, methods, "", "", "1", now_ms)

    async def _call(
        self,
        khash: str,
        calls: int,
        methods: Mapping[str, int],
        origin: str,
        ip_bits: str,
        metering: str,
        now_ms: int | None,
        per_call: Sequence[str] = (),
    ) -> Decision:
        keys = (ks.record_key(self._prefix, khash), ks.key_tag(self._prefix, khash))
        args = ["" if now_ms is None else str(now_ms), str(calls), origin, ip_bits, metering]
        if len(per_call) > 1:
            args.extend(self._plans.call_admit_args(per_call))
        else:
            args.extend(self._plans.admit_args(calls, methods))
        return decision_from_reply(await self._run(keys, args))


def decision_from_reply(res: Sequence[Any]) -> Decision:
    key_id = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
    plan = res[6].decode() if isinstance(res[6], bytes) else str(res[6])
    mask = ""
    if len(res) > 7:
        mask = res[7].decode() if isinstance(res[7], bytes) else str(res[7])
    status = Status(int(res[0]))
    if status is Status.FORBIDDEN:  # its 8th entry names the list that refused
        return Decision(status, key_id, denied=mask)
    return Decision(status, key_id, int(res[2]), int(res[3]), int(res[4]), int(res[5]), plan, mask)
