-- keyrecord.lua: the start both admission scripts share, written once.
--
-- Not a script of its own: limiter.load_lua puts this text in place of the
-- line `--#include keyrecord.lua` in admit.lua and lease.lua before they are
-- registered, so each script still runs as one EVALSHA and its SHA covers
-- this block too. It only defines local functions; the including script
-- reads the record itself (the two read different fields).
--
-- Shared ARGV layout: ARGV[1] now in ms ("" = Redis TIME), ARGV[6] P = the
-- number of plans, then P groups of 5 from ARGV[7]: name, rate (units/s),
-- burst, daily quota (0 = none), cost of this request
-- (limiter.PlanTable.groups builds them).

-- now in ms: the injected time (tests), else Redis TIME
local function clock_ms()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- a record read as HMGET id, plan, exp, rev, ...: revoked, or expired at `now`
local function key_gone(rec, now)
  return (rec[4] and rec[4] ~= '') or (rec[3] and rec[3] ~= '' and now >= tonumber(rec[3]))
end

-- the ARGV index of the plan group named `name` (an unknown name: the first plan)
local function plan_base(name)
  for p = 0, tonumber(ARGV[6]) - 1 do
    if ARGV[7 + p * 5] == name then
      return 7 + p * 5
    end
  end
  return 7
end
