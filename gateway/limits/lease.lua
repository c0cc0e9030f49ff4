-- lease.lua: lease a slice of a key's token bucket (and daily quota) in one call.
--
-- A worker asks for the units of the request in hand (ARGV[3]) plus a slice
-- (ARGV[4]) it expects to spend soon; the script grants the cost and as much
-- of the slice as leaves three quarters of what remains for the other
-- workers, and deducts the whole grant from the shared bucket and the day's
-- compute units at once. The worker then admits locally until its slice is
-- spent. Units are deducted before they are used, so no number of workers
-- can ever admit more than burst + rate * t; units a worker leased but did
-- not use come back through ARGV[5] (refilled into the bucket, capped at the
-- burst, and taken off the day's count). A bucket near empty grants the cost
-- alone, so a key at its limit is admitted one call at a time, exactly.
--
-- Everything of one API key shares the hash tag {<sha256>}: one Cluster slot.
--
-- KEYS[1] key record hash (+ bucket fields t, ts)   <p>:{H}:k
-- KEYS[2] usage key prefix                           <p>:{H}:
-- ARGV[1] now in ms, or "" to use redis TIME
-- ARGV[2] "1": also return the record's fields (a key this worker has not cached)
-- ARGV[3] cost of the request in hand in compute units (0: only give units back);
--         for a batch admitted call by call, each call's cost in order
--         ("3,1,1", keyrecord.lua)
-- ARGV[4] slice: extra units wanted beyond the cost
-- ARGV[5] units given back (leased earlier, not used)
-- ARGV[6] P = number of plans, then P groups of 5 (see keyrecord.lua):
--         name, rate (units/s), burst, daily quota (0 = none), cost of this request
--         (every plan's group each call: the record names the plan; a warm
--         key's cost comes in ARGV[3], -1 means "this group's cost")
--
-- The owner's per-key caps (record fields rcap: requests per second, dcap:
-- compute units per day; absent = the plan's) narrow the plan: the bucket
-- refills at min(plan rate, rcap) and holds at most min(plan burst, rcap),
-- the day allows min(plan quota, dcap).
--
-- returns {status, granted, tokens_left, retry_ms, plan, burst, rate_milli,
--          [id, exp, rev, org, ipb, mth], [mask]}
--   mask (a batch admitted call by call, always last): one status digit per
--   call, 0 = admitted; status is 0 when any call was, granted covers the
--   admitted calls, and retry_ms tells the refused ones when to come back
--   status 0 granted, 1 unknown/expired/revoked, 3 over the token bucket,
--   4 over the daily quota, 5 costs more than the bucket can ever hold,
--   6 over the key's own rate cap, 7 over the key's own daily cap

--#include keyrecord.lua

local rec = redis.call('HMGET', KEYS[1], 'id', 'plan', 'exp', 'rev', 'org', 'ipb', 'mth', 't', 'ts',
  'rcap', 'dcap')
local function reply(status, granted, left, retry, plan, burst, rate)
  local out = {status, granted, left, retry, plan or '', burst or 0, math.floor((rate or 0) * 1000)}
  if ARGV[2] == '1' then
    for i = 1, 7 do
      if i ~= 2 then out[#out + 1] = rec[i] or '' end
    end
  end
  return out
end
if not rec[1] then
  return reply(1, 0, 0, 0)
end

local now = clock_ms()
if key_gone(rec, now) then
  return reply(1, 0, 0, 0)
end

-- the key's plan (an unknown name falls back to the first plan)
local base = plan_base(rec[2])
local plan, rate, burst, quota, rate_status, quota_status = key_limits(rec, base)
local cost_field = ARGV[3]
if cost_field == '-1' then cost_field = ARGV[base + 4] end
local list, cost = cost_list(cost_field)
local slice = tonumber(ARGV[4])
local back = tonumber(ARGV[5])
local day_key = KEYS[2] .. 'd:' .. math.floor(now / DAY_MS)

-- refill continuously at `rate`; the level is clamped to this plan's burst,
-- so a plan switch keeps the level and never grants a fresh bucket
local tokens = tonumber(rec[8])
local ts = tonumber(rec[9])
if not tokens or not ts then
  tokens, ts = burst, now
end
if now > ts then
  tokens = tokens + (now - ts) * rate / 1000
  ts = now
end
if back > 0 then
  tokens = tokens + back
  if redis.call('HEXISTS', day_key, 'cu') == 1 then
    redis.call('HINCRBY', day_key, 'cu', -back)
  end
end
if tokens > burst then tokens = burst end

local function refuse(status, retry)
  if back > 0 then
    redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts)
  end
  return reply(status, 0, math.floor(tokens), retry, plan, burst, rate)
end

if cost == 0 then
  redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts)
  return reply(0, 0, math.floor(tokens), 0, plan, burst, rate)
end
if #list > 1 then
  -- a batch admitted call by call (keyrecord.lua walk_calls), exactly as
  -- admit.lua does; the slice is granted as for a single request
  local mask, n, units, stop, retry, room = walk_calls(list, burst, tokens, rate, quota, day_key,
    now, rate_status, quota_status)
  if n == 0 then
    local out = refuse(stop or 5, retry)
    out[#out + 1] = mask
    return out
  end
  cost = units
  if room >= 0 then room = room - units end
  local extra = math.floor((tokens - cost) / 4)
  if slice < extra then extra = slice end
  if room >= 0 and room < extra then extra = room end
  if stop then extra = 0 end  -- the bucket is short: lease nothing beyond the calls
  local granted = cost + extra
  tokens = tokens - granted
  redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts, 'used', now)
  if granted > 0 and redis.call('HINCRBY', day_key, 'cu', granted) == granted then
    redis.call('PEXPIRE', day_key, DAY_TTL_MS)  -- first units of the day
  end
  local out = reply(0, granted, math.floor(tokens), retry, plan, burst, rate)
  out[#out + 1] = mask
  return out
end
if cost > burst then
  return refuse(5, 0)
end
local room = -1
if quota > 0 then
  local used = tonumber(redis.call('HGET', day_key, 'cu') or '0')
  if used + cost > quota then
    return refuse(quota_status, to_day_end(now))
  end
  room = quota - used - cost
end
if cost > tokens then
  return refuse(rate_status, math.ceil((cost - tokens) * 1000 / rate))
end

local extra = math.floor((tokens - cost) / 4)
if slice < extra then extra = slice end
if room >= 0 and room < extra then extra = room end
local granted = cost + extra
tokens = tokens - granted
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts, 'used', now)
if redis.call('HINCRBY', day_key, 'cu', granted) == granted then
  redis.call('PEXPIRE', day_key, DAY_TTL_MS)  -- first units of the day
end
return reply(0, granted, math.floor(tokens), 0, plan, burst, rate)
