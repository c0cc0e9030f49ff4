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
-- (limiter.PlanTable.groups builds them). The cost is one number, or for a
-- batch admitted call by call the cost of each call in order, comma-separated
-- ("3,1,1"; PlanTable.call_groups). Usage by day is the hash <p>:{H}:d:<day>,
-- its field cu the day's compute units.

local DAY_MS = 86400000
local DAY_TTL_MS = 7862400000  -- usage by day is kept 91 days

-- now in ms: the injected time (tests), else Redis TIME
local function clock_ms()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ms from `now` until the day (UTC) ends: when a daily quota refills
local function to_day_end(now)
  return (math.floor(now / DAY_MS) + 1) * DAY_MS - now
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

-- The key's limits: its plan's group (found by `plan_base`), narrowed by the
-- owner's per-key caps (record fields 10 and 11 of the HMGET: rcap requests
-- per second, dcap compute units per day; absent = the plan's). Returns
-- plan, rate, burst, quota, and the refusal statuses for the bucket (3, or 6
-- when the key's cap sets the rate) and the day (4, or 7 for the key's cap).
local function key_limits(rec, base)
  local rate = tonumber(ARGV[base + 1])
  local burst = tonumber(ARGV[base + 2])
  local quota = tonumber(ARGV[base + 3])
  local rate_status, quota_status = 3, 4
  local rcap = tonumber(rec[10] or '')
  if rcap and rcap > 0 and rcap < rate then
    rate, rate_status = rcap, 6
    if rcap < burst then burst = math.max(1, math.floor(rcap)) end
  end
  local dcap = tonumber(rec[11] or '')
  if dcap and dcap > 0 and (quota == 0 or dcap < quota) then
    quota, quota_status = dcap, 7
  end
  return ARGV[base], rate, burst, quota, rate_status, quota_status
end

-- A cost field as a list of call costs and their sum ("7" -> {7}, 7;
-- "3,1,1" -> {3, 1, 1}, 5).
local function cost_list(field)
  local list, sum = {}, 0
  for c in string.gmatch(field, '[^,]+') do
    local n = tonumber(c)
    list[#list + 1] = n
    sum = sum + n
  end
  return list, sum
end

-- A batch admitted call by call, in order, against the bucket (`tokens`,
-- refilling at `rate`) and the day's compute units in the hash `day_key`
-- (`quota`, 0 = none). A call costing more than `burst` can never pass
-- (status 5) and is passed over; the first call the bucket or the day
-- cannot hold now stops the walk: it and every later call are refused with
-- that status. Returns the mask (one status digit per call, 0 = admitted),
-- how many calls were admitted, their units, the stopping status (or nil),
-- the retry in ms for the refused calls (until the bucket holds the first
-- of them, or until the day ends; 0 when none was refused for those) and
-- the units the day had room for before these (-1 = no quota).
local function walk_calls(list, burst, tokens, rate, quota, day_key, now, rate_status,
    quota_status)
  local room = -1
  if quota > 0 then
    room = quota - tonumber(redis.call('HGET', day_key, 'cu') or '0')
  end
  local mask, n, units, stop, short = {}, 0, 0, nil, 0
  for i = 1, #list do
    local c = list[i]
    local s = 0
    if c > burst then
      s = 5
    elseif stop then
      s = stop
    elseif room >= 0 and units + c > room then
      stop = quota_status
      s = stop
    elseif units + c > tokens then
      stop = rate_status
      s = stop
      short = units + c - tokens
    else
      units = units + c
      n = n + 1
    end
    mask[i] = s
  end
  local retry = 0
  if stop == rate_status then
    retry = math.ceil(short * 1000 / rate)
  elseif stop then
    retry = to_day_end(now)
  end
  return table.concat(mask), n, units, stop, retry, room
end
