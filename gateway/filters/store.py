"""Filter state in Redis: one hash per filter under its owner's ``{H}`` tag, with a TTL.

    p:{H}:f:<id>   hash: net, kind, crit (the filter as JSON), next (first
                   block not yet scanned), seen (the last polls: block number,
                   hash, logs delivered), ver (bumped by every poll); PEXPIRE ttl
    p:{H}:fs       sorted set id -> expiry ms: the key's live filters (the cap)

Expiry times in the index are Redis's clock (``TIME``), not a gateway
process's: processes whose clocks disagree still agree on which filters
count against the cap. The name holds the owner's key hash, so another
key's lookup finds nothing (``filter not found``), and each of a key's
filter calls touches one Cluster slot. Creation checks the cap and writes
in one script; a poll writes back only if ``ver`` is still what it read
(compare-and-set in one script): two polls of one filter racing (a client
retrying on another gateway process) never both deliver the same changes.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.redis import keyspace as ks

# Redis's clock in ms, unless a test injects one in ARGV[1]
_NOW_LUA: Final = """
local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS[1] index zset  KEYS[2] filter hash
# ARGV[1] now ms or ""  ARGV[2] ttl ms  ARGV[3] cap  ARGV[4] id  ARGV[5...] field, value pairs
# returns 1 created, 0 the key is at its cap
CREATE_LUA: Final = (
    _NOW_LUA
    + """
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[4])
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS[1] index zset  KEYS[2] filter hash
# ARGV[1] now ms or ""  ARGV[2] ttl ms  ARGV[3] id  ARGV[4] ver read  ARGV[5...] field, value
# pairs; returns 1 written, 0 another poll wrote first (or the filter is gone)
SAVE_LUA: Final = (
    _NOW_LUA
    + """
if redis.call('HGET', KEYS[2], 'ver') ~= ARGV[4] then return 0 end
redis.call('HSET', KEYS[2], 'ver', tonumber(ARGV[4]) + 1, unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local expiry = now_ms() + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
)

_ID_HEX: Final = frozenset("0123456789abcdef")


def new_id() -> str:
    """A filter id: 128 random bits as geth-style hex (``0x`` + 32 digits)."""
    return "0x" + secrets.token_hex(16)


def well_formed_id(value: Any) -> str | None:
    """The id in its stored form (lower case), or None when it cannot be one of ours."""
    if type(value) is not str or len(value) != 34 or value[:2] not in ("0x", "0X"):
        return None
    digits = value[2:].lower()
    return "0x" + digits if set(digits) <= _ID_HEX else None


@dataclass(slots=True)
class FilterState:
    """One filter as read from Redis (``seen``: [[number, hash, logs or None], ...])."""

    id: str
    net: str
    kind: str  # "logs", "blocks" or "finalized"
    crit: dict[str, Any]
    next: int
    seen: list[list[Any]]
    ver: str


class FilterStore:
    """Create, read, compare-and-set and delete filters (hot-path Redis client)."""

    def __init__(self, redis: Any, prefix: str, ttl_s: float, max_per_key: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._cap = max_per_key
        self._create = redis.register_script(CREATE_LUA)
        self._save = redis.register_script(SAVE_LUA)

    async def create(
        self,
        khash: str,
        net: str,
        kind: str,
        crit: dict[str, Any],
        next_block: int,
        seen: list[list[Any]],
        now_ms: int | None = None,
    ) -> str | None:
        """A new filter's id, or None when the key already has ``max_per_key`` live."""
        fid = new_id()
        fields = (
            ("net", net),
            ("kind", kind),
            ("crit", orjson.dumps(crit)),
            ("next", next_block),
            ("seen", orjson.dumps(seen)),
            ("ver", 0),
        )
        created = await self._create(
            keys=[ks.filter_index(self._prefix, khash), ks.filter_state(self._prefix, khash, fid)],
            args=[_now(now_ms), self._ttl_ms, self._cap, fid, *_flat(fields)],
        )
        return fid if int(created) == 1 else None

    async def load(self, khash: str, fid: str) -> FilterState | None:
        """The filter ``fid`` of key ``khash``; None if unknown, expired or another key's."""
        raw = await self._redis.hgetall(ks.filter_state(self._prefix, khash, fid))
        if not raw:
            return None
        try:
            f = {_text(k): v for k, v in raw.items()}
            return FilterState(
                id=fid,
                net=_text(f["net"]),
                kind=_text(f["kind"]),
                crit=orjson.loads(f["crit"]),
                next=int(f["next"]),
                seen=orjson.loads(f["seen"]),
                ver=_text(f["ver"]),
            )
        except (KeyError, ValueError, orjson.JSONDecodeError):
            return None  # not a state this code wrote: treat as gone

    async def save(
        self,
        khash: str,
        state: FilterState,
        next_block: int,
        seen: list[list[Any]],
        now_ms: int | None = None,
    ) -> bool:
        """Write a poll's progress if no other poll did since ``load``; refresh the TTL."""
        fields = (("next", next_block), ("seen", orjson.dumps(seen)))
        written = await self._save(
            keys=[
                ks.filter_index(self._prefix, khash),
                ks.filter_state(self._prefix, khash, state.id),
            ],
            args=[_now(now_ms), self._ttl_ms, state.id, state.ver, *_flat(fields)],
        )
        return int(written) == 1

    async def delete(self, khash: str, fid: str) -> bool:
        """Uninstall; True if the filter existed."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.delete(ks.filter_state(self._prefix, khash, fid))
        pipe.zrem(ks.filter_index(self._prefix, khash), fid)
        deleted, _ = await pipe.execute()
        return int(deleted) == 1


def _now(now_ms: int | None) -> int | str:
    return "" if now_ms is None else now_ms  # "": Redis's own clock


def _flat(fields: tuple[tuple[str, Any], ...]) -> list[Any]:
    return [item for pair in fields for item in pair]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
