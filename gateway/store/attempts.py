"""Throttle counters: fixed-window failure counts and log-in attempt budgets.

Each decision is one Lua call (count and check together), so parallel
attempts cannot all slip in before the first is counted, and no counter is
ever left without a TTL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.redis import keyspace as ks
from gateway.store.core import StoreCore
from gateway.store.records import AttemptCounter


class Attempts(StoreCore):
    """Failure counters and log-in attempt throttles over Lua scripts registered once."""

    async def count_failure(self, name: str, window_ms: int) -> tuple[int, int]:
        """Add one to counter ``name``: (count in this window, ms until it resets)."""
        if self._hit_script is None:
            self._hit_script = self.redis.register_script(_HIT_LUA)
        count, ttl = await self._hit_script(keys=[ks.counter(self.prefix, name)], args=[window_ms])
        return int(count), int(ttl)

    async def take_attempt(self, counters: Sequence[AttemptCounter], marker: str) -> int:
        """Count one attempt against every counter, unless one is already full.

        Returns 0 when the attempt was counted (go on and check the
        password), else the ms until the fullest counter resets (refuse, and
        count nothing). Checking and counting are one script call, so
        parallel attempts cannot all slip in before the first is counted.
        While ``marker`` exists, counters flagged ``skippable`` are neither
        checked nor able to refuse (they are still counted).
        """
        if self._attempt_script is None:
            self._attempt_script = self.redis.register_script(_ATTEMPT_LUA)
        names = [c.name for c in counters] + [marker]
        keys = [ks.login_counter(self.prefix, n) for n in names]
        args: list[Any] = [len(counters)]
        for c in counters:
            args += [max(1, c.limit), max(1, c.window_ms), int(c.skippable)]
        refused, wait_ms = await self._attempt_script(keys=keys, args=args)
        return max(1, int(wait_ms)) if int(refused) else 0

    async def attempt_succeeded(
        self, clear: str, refund: Sequence[str], marker: str, remember_ms: int
    ) -> None:
        """The password was right: clear ``clear``, give one attempt back to each
        of ``refund`` (a success is not a guess), and set ``marker`` for ``remember_ms``."""
        if self._success_script is None:
            self._success_script = self.redis.register_script(_SUCCESS_LUA)
        keys = [ks.login_counter(self.prefix, n) for n in (clear, marker, *refund)]
        await self._success_script(keys=keys, args=[max(1, remember_ms)])


# KEYS[1] counter   ARGV[1] window in ms
# returns {count, ms until the window resets}
# INCR and PEXPIRE in one script: a counter can never be left without a TTL.
_HIT_LUA = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {n, redis.call('PTTL', KEYS[1])}
"""

# KEYS[1..n] fixed-window counters   KEYS[n+1] marker
# ARGV[1] n, then per counter: limit, window ms, skippable (1 = not checked
#         while the marker exists)
# returns {0, 0} when the attempt was counted on every counter,
#         {1, ms until the fullest counter resets} when refused (nothing counted)
_ATTEMPT_LUA = """
local n = tonumber(ARGV[1])
local known = redis.call('EXISTS', KEYS[n + 1]) == 1
local wait = 0
for i = 1, n do
  local base = 3 * i - 1
  if not (known and ARGV[base + 2] == '1') then
    local count = tonumber(redis.call('GET', KEYS[i]) or '0')
    if count >= tonumber(ARGV[base]) then
      local ttl = redis.call('PTTL', KEYS[i])
      if ttl < 0 then
        ttl = tonumber(ARGV[base + 1])
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      if ttl > wait then wait = ttl end
    end
  end
end
if wait > 0 then
  return {1, wait}
end
for i = 1, n do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
  end
end
return {0, 0}
"""

# KEYS[1] counter to clear   KEYS[2] marker   KEYS[3..] counters to give one back
# ARGV[1] marker lifetime in ms
# DECR only a live, positive counter: it keeps its TTL and never goes negative.
_SUCCESS_LUA = """
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
for i = 3, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count > 0 then redis.call('DECR', KEYS[i]) end
end
return 0
"""
