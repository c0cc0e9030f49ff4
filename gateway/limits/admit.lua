-- admit.lua: the whole per-request decision in one round trip.
--
-- Resolves the key record, checks state, expiry and allowlists, applies the
-- plan's daily quota and token bucket (using Redis TIME unless a time is
-- injected for tests), and bumps the usage counters.
--
-- Every key touched shares the hash tag {<sha256 of the api key>} so the
-- script runs on one Cluster slot. KEYS[2] is that tag's prefix; the
-- time-bucketed usage keys are built from it (same slot by construction).
-- The token bucket (fields t, ts) lives in the key record itself: one HMGET
-- reads record and bucket, one HSET writes bucket and last-used time, and
-- the bucket never expires on its own (an expired bucket would refill).
-- TTLs on usage hashes are set when a hash or field is first written, not
-- on every call. Redis work per check: about 7 commands.
--
-- KEYS[1] key record hash (+ bucket)  <p>:{H}:k
-- KEYS[2] usage key prefix            <p>:{H}:
-- ARGV[1] now in ms, or "" to use redis TIME
-- ARGV[2] number of calls in the request (usage "requests")
-- ARGV[3] Origin header, or ""
-- ARGV[4] client IP: '4' or '6' (its family) then its 128 bits (IPv4 mapped
--         into IPv6), or "" when unknown
-- ARGV[5] "q": a call that waited for the bucket, asked about again: its
--         refusal is not counted again (see `refuse`); else
--         "1": meter units the gateway delivered (notifications); key state,
--         quota and bucket are checked, the allowlists are not: they judge
--         what a client asks, and the subscription was judged when asked for
-- ARGV[6] P = number of plans, then P groups of 5 (see keyrecord.lua):
--         name, rate (units/s), burst, daily quota (0 = none), cost of this request
-- then    M method/count pairs (the distinct methods of the request; for a batch
--         admitted call by call, one pair per call in the costs' order)
--
-- returns {status, key_id, limit, remaining, reset_s, retry_ms, plan, [mask]}
--   mask (a batch admitted call by call): one status digit per call, 0 =
--   admitted; status is 0 when any call was admitted, and retry_ms then
--   tells the refused calls when to come back
--   status 0 admitted, 1 unknown/expired/revoked, 2 not allowed by an
--   allowlist, 3 over the token bucket, 4 over the daily quota,
--   5 costs more than the bucket can ever hold, 6 over the owner's per-key
--   rate cap, 7 over the owner's per-key daily cap; for 2, the 8th entry
--   names the list that refused ('origin', 'ip' or 'method:<name>')

--#include keyrecord.lua

local HOUR_MS = 3600000
local HOUR_TTL_MS = 176400000   -- minutes, in hour hashes, are kept 49 h

local rec = redis.call('HMGET', KEYS[1], 'id', 'plan', 'exp', 'rev', 'org', 'ipb', 'mth', 't', 'ts',
  'rcap', 'dcap')
local key_id = rec[1]
if not key_id then
  return {1, '', 0, 0, 0, 0, ''}
end

local now = clock_ms()
if key_gone(rec, now) then
  return {1, key_id, 0, 0, 0, 0, ''}
end

local prefix = KEYS[2]
local day_key = prefix .. 'd:' .. math.floor(now / DAY_MS)
local mstart = 7 + tonumber(ARGV[6]) * 5
if ARGV[5] == '1' then
  -- metering what was delivered: no allowlist applies (see ARGV[5])
  rec[5], rec[6], rec[7] = false, false, false
end

-- allowlists: entries of one list are ORed, lists are ANDed; an entry '*'
-- alone matches everything (an absent Origin or IP included)
local allowed = true
local denied = ''   -- the list that refused: 'origin', 'ip' or 'method:<name>'
local origins = rec[5]
if origins and origins ~= '' and not string.find(origins, '\n*\n', 1, true) then
  -- entries are stored lowercased: 'scheme://host[:port]', 'host[:port]'
  -- (any scheme), or a wildcard '*.suffix' / 'scheme://*.suffix' that
  -- matches hosts ending in '.suffix' (a dot boundary, at least one label
  -- before it: '*.example.com' matches neither 'evilexample.com' nor
  -- 'example.com' itself)
  local origin = string.lower(ARGV[3])
  local ok = false
  if origin ~= '' then
    if string.find(origins, '\n' .. origin .. '\n', 1, true) then
      ok = true
    else
      local scheme, host = string.match(origin, '^([^/]+)://([^/]+)$')
      if host then
        if string.find(origins, '\n' .. host .. '\n', 1, true) then
          ok = true
        else
          for entry in string.gmatch(origins, '[^\n]+') do
            local star = string.find(entry, '*', 1, true)
            if star then
              local head = string.sub(entry, 1, star - 1)
              local suffix = string.sub(entry, star + 1)
              if string.sub(suffix, 1, 1) == '.' and #host > #suffix
                  and string.sub(host, -#suffix) == suffix
                  and (head == '' or head == scheme .. '://') then
                ok = true
                break
              end
            end
          end
        end
      end
    end
  end
  allowed = ok
  if not ok then denied = 'origin' end
end
-- IP entries are bit prefixes behind a family mark ('4' or '6', see
-- limiter.cidr_bits), so '0.0.0.0/0' is '4...' and '::/0' is '6': each
-- matches its whole family and nothing of the other. Entries stored before
-- the mark existed are bare bits and are compared without it.
local ips = rec[6]
if allowed and ips and ips ~= '' and not string.find(ips, '\n*\n', 1, true) then
  local bits = ARGV[4]
  local ok = false
  if bits ~= '' then
    for entry in string.gmatch(ips, '[^\n]+') do
      local mark = string.sub(entry, 1, 1)
      if mark == '4' or mark == '6' then
        if string.sub(bits, 1, #entry) == entry then
          ok = true
          break
        end
      elseif string.sub(bits, 2, #entry + 1) == entry then
        ok = true
        break
      end
    end
  end
  allowed = ok
  if not ok then denied = 'ip' end
end
local methods = rec[7]
if allowed and methods and methods ~= '' and not string.find(methods, '\n*\n', 1, true) then
  for i = mstart, #ARGV, 2 do
    if not string.find(methods, '\n' .. ARGV[i] .. '\n', 1, true) then
      allowed = false
      denied = 'method:' .. ARGV[i]
      break
    end
  end
end
-- a refusal counts in the day's usage hash under `field` and answers `reply`;
-- a call asked about again after waiting for the bucket (ARGV[5] 'q') was
-- counted as rate-limited once already, at its first refusal
local quiet = ARGV[5] == 'q'
local function refuse(field, n, reply)
  if not (quiet and field == 'lim') then
    redis.call('HINCRBY', day_key, field, n)
    redis.call('PEXPIRE', day_key, DAY_TTL_MS)
  end
  return reply
end

if not allowed then
  return refuse('den', 1, {2, key_id, 0, 0, 0, 0, '', denied})
end

-- the plan of this key (unknown plan names fall back to the first plan)
local base = plan_base(rec[2] or '')
-- the owner's per-key caps narrow the plan (keyrecord.lua, as in lease.lua)
local plan, rate, burst, quota, rate_status, quota_status = key_limits(rec, base)
local list, cost = cost_list(ARGV[base + 4])
local ncalls = tonumber(ARGV[2])

-- token bucket, refilled continuously at `rate` units per second
local tokens = tonumber(rec[8])
local ts = tonumber(rec[9])
if not tokens or not ts then
  tokens = burst
  ts = now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  ts = now
end
if tokens > burst then
  tokens = burst
end

-- usage of admitted calls: per minute (kept 48 h, in hour hashes), per day
-- (90 days), per method (only the pairs `admitted` says yes to)
local function count_usage(n, units, admitted)
  local hour_key = prefix .. 'h:' .. math.floor(now / HOUR_MS)
  if redis.call('HINCRBY', hour_key, math.floor(now / 60000) % 60, n) == n then
    redis.call('PEXPIRE', hour_key, HOUR_TTL_MS)  -- a new minute: (re)arm the TTL
  end
  if redis.call('HINCRBY', day_key, 'req', n) == n then
    redis.call('PEXPIRE', day_key, DAY_TTL_MS)  -- first request of the day
  end
  redis.call('HINCRBY', day_key, 'cu', units)
  local k = 0
  for i = mstart, #ARGV, 2 do
    k = k + 1
    if admitted(k) then
      redis.call('HINCRBY', day_key, 'm:' .. ARGV[i], ARGV[i + 1])
    end
  end
end

if #list > 1 then
  -- a batch admitted call by call (keyrecord.lua walk_calls); the method
  -- pairs are then one per call, in the order of the costs
  local mask, n, units, stop, retry = walk_calls(list, burst, tokens, rate, quota, day_key, now,
    rate_status, quota_status)
  local refused = #list - n
  if n == 0 then
    local reset = math.ceil((burst - tokens) / rate)
    return refuse('lim', ncalls,
      {stop or 5, key_id, burst, math.floor(tokens), reset, retry, plan, mask})
  end
  tokens = tokens - units
  redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts, 'used', now)
  count_usage(ncalls - refused, units, function(k) return string.sub(mask, k, k) == '0' end)
  if not quiet then
    redis.call('HINCRBY', day_key, 'lim', refused)
  end
  return {0, key_id, burst, math.floor(tokens), math.ceil((burst - tokens) / rate), retry, plan,
    mask}
end

if cost > burst then
  return refuse('lim', ncalls, {5, key_id, burst, math.floor(tokens), 0, 0, plan})
end

if quota > 0 then
  local used = tonumber(redis.call('HGET', day_key, 'cu') or '0')
  if used + cost > quota then
    local retry = to_day_end(now)
    return refuse('lim', ncalls,
      {quota_status, key_id, burst, 0, math.ceil(retry / 1000), retry, plan})
  end
end

if cost > tokens then
  local retry = math.ceil((cost - tokens) * 1000 / rate)
  local reset = math.ceil((burst - tokens) / rate)
  return refuse('lim', ncalls, {rate_status, key_id, burst, math.floor(tokens), reset, retry, plan})
end
tokens = tokens - cost
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', ts, 'used', now)
count_usage(ncalls, cost, function() return true end)
return {0, key_id, burst, math.floor(tokens), math.ceil((burst - tokens) / rate), 0, plan}
