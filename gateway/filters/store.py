"""Filter state in Redis: one hash per filter under its owner's ``{H}`` tag, with a TTL.

    p:{H}:f:<id>   hash: net, kind, crit (the filter as JSON), next (first
                   block not yet scanned), seen (the last polls: block number,
                   hash, logs delivered), ver (bumped by every poll), sz (the
                   bytes of crit and seen); PEXPIRE ttl
    p:{H}:fs       sorted set id -> expiry ms: the key's live filters (the caps)

A key's filters are capped in number (``max_per_key``) and in bytes
(``max_key_bytes``: the sum of their ``sz``, summed in the script over the
key's live ids, at most ``max_per_key`` reads): creation past either is
refused, and a poll whose remembered logs would pass the byte cap is saved
without them (``FilterStore.save``), so nothing a key holder calls makes the
shared Redis grow past what the operator set.

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

from gateway.config import FiltersConfig
from gateway.redis import keyspace as ks

# Redis's clock in ms, unless a test injects one in ARGV[1]
_NOW_LUA: Final = """
local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# The bytes (field sz) of the key's live filters other than `skip`; KEYS[3] is
# the prefix of their hashes (same hash tag, so the same Cluster slot).
_OTHERS_LUA: Final = """
local function others_bytes(skip)
  local total = 0
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if id ~= skip then
      total = total + (tonumber(redis.call('HGET', KEYS[3] .. id, 'sz')) or 0)
    end
  end
  return total
end
"""

# KEYS[1] index zset  KEYS[2] filter hash  KEYS[3] filter hash prefix
# ARGV[1] now ms or ""  ARGV[2] ttl ms  ARGV[3] cap  ARGV[4] id  ARGV[5] sz
# ARGV[6] byte cap (0 = none)  ARGV[7...] field, value pairs
# returns 1 created, 0 the key is at its cap, -1 at its byte cap
CREATE_LUA: Final = (
    _NOW_LUA
    + _OTHERS_LUA
    + """
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
local cap = tonumber(ARGV[6])
if cap > 0 and others_bytes('') + tonumber(ARGV[5]) > cap then return -1 end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[4])
redis.call('HSET', KEYS[2], 'sz', ARGV[5], unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS[1] index zset  KEYS[2] filter hash  KEYS[3] filter hash prefix
# ARGV[1] now ms or ""  ARGV[2] ttl ms  ARGV[3] id  ARGV[4] ver read  ARGV[5] sz
# ARGV[6] byte cap (0 = none)  ARGV[7...] field, value pairs
# returns 1 written, 0 another poll wrote first (or the filter is gone), -1 the
# key's filters would pass the byte cap (nothing written)
SAVE_LUA: Final = (
    _NOW_LUA
    + _OTHERS_LUA
    + """
if redis.call('HGET', KEYS[2], 'ver') ~= ARGV[4] then return 0 end
local cap = tonumber(ARGV[6])
if cap > 0 and others_bytes(ARGV[3]) + tonumber(ARGV[5]) > cap then return -1 end
redis.call('HSET', KEYS[2], 'ver', tonumber(ARGV[4]) + 1, 'sz', ARGV[5], unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local expiry = now_ms() + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
)

# KEYS[1] index zset  KEYS[2] filter hash  ARGV[1] the network asking
# returns 1 deleted, 0 no such filter on that network (another network's is kept)
DELETE_LUA: Final = """
if redis.call('HGET', KEYS[2], 'net') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], string.sub(KEYS[2], -34))
return 1
"""

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

    def __init__(
        self, redis: Any, prefix: str, ttl_s: float, max_per_key: int, max_key_bytes: int = 0
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._cap = max_per_key
        self._bytes = max_key_bytes  # 0: no byte cap
        self._create = redis.register_script(CREATE_LUA)
        self._save = redis.register_script(SAVE_LUA)
        self._delete = redis.register_script(DELETE_LUA)

    @classmethod
    def for_config(cls, redis: Any, prefix: str, cfg: FiltersConfig) -> FilterStore:
        """The store with the ``[filters]`` section's TTL and caps."""
        return cls(redis, prefix, cfg.ttl_s, cfg.max_per_key, cfg.max_key_bytes)

    def _keys(self, khash: str, fid: str) -> list[str]:
        state = ks.filter_state(self._prefix, khash, fid)
        return [ks.filter_index(self._prefix, khash), state, state[: -len(fid)]]

    async def create(
        self,
        khash: str,
        net: str,
        kind: str,
        crit: dict[str, Any],
        next_block: int,
        seen: list[list[Any]],
        now_ms: int | None = None,
    ) -> str | int:
        """A new filter's id, or the cap it would pass: 0 ``max_per_key``, -1 the bytes."""
        fid = new_id()
        crit_json, seen_json = orjson.dumps(crit), orjson.dumps(seen)
        fields = (
            ("net", net),
            ("kind", kind),
            ("crit", crit_json),
            ("next", next_block),
            ("seen", seen_json),
            ("ver", 0),
        )
        size = len(crit_json) + len(seen_json)
        args = [_now(now_ms), self._ttl_ms, self._cap, fid, size, self._bytes, *_flat(fields)]
        created = int(await self._create(keys=self._keys(khash, fid), args=args))
        return fid if created == 1 else created

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
        """Write a poll's progress if no other poll did since ``load``; refresh the TTL.

        Past the key's byte cap the remembered logs are left out (a re-org
        past them can then not mark them removed); the progress is kept.
        """
        written = await self._save_seen(khash, state, next_block, seen, now_ms)
        if written == -1:
            bare = [[entry[0], entry[1], None] for entry in seen]
            written = await self._save_seen(khash, state, next_block, bare, now_ms)
        return written == 1

    async def _save_seen(
        self,
        khash: str,
        state: FilterState,
        next_block: int,
        seen: list[list[Any]],
        now_ms: int | None,
    ) -> int:
        seen_json = orjson.dumps(seen)
        size = len(orjson.dumps(state.crit)) + len(seen_json)
        fields = (("next", next_block), ("seen", seen_json))
        args = [_now(now_ms), self._ttl_ms, state.id, state.ver, size, self._bytes, *_flat(fields)]
        return int(await self._save(keys=self._keys(khash, state.id), args=args))

    async def delete(self, khash: str, net: str, fid: str) -> bool:
        """Uninstall; True if the filter existed on network ``net`` (another's is kept)."""
        keys = self._keys(khash, fid)[:2]
        return int(await self._delete(keys=keys, args=[net])) == 1


def _now(now_ms: int | None) -> int | str:
    return "" if now_ms is None else now_ms  # "": Redis's own clock


def _flat(fields: tuple[tuple[str, Any], ...]) -> list[Any]:
    return [item for pair in fields for item in pair]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
