-- Token buckets, one hash each, taken all or none: the senders of one call, a key's bundle rate.
-- KEYS[1..n] the buckets (fields t = tokens, ts = ms of the last update), all of one hash
--   slot on a Redis Cluster (the caller groups them)
-- ARGV[1] rate, tokens per second (> 0)   ARGV[2] burst
-- ARGV[3] now in ms, '' = Redis TIME (tests pass their own clock)
-- ARGV[3 + i] the cost taken from KEYS[i]
-- returns {allowed 1|0, retry_ms, index}: when refused, the first bucket short of its cost
-- (1-based) and the ms until it would hold it; nothing is taken then (a refused bundle
-- spends no sender's tokens)
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[3])
end
local per_ms = tonumber(ARGV[1]) / 1000
local burst = tonumber(ARGV[2])
local ttl = math.ceil(burst / per_ms) + 1000
local left = {}
local stamp = {}
for i = 1, #KEYS do
  local cost = tonumber(ARGV[3 + i])
  local v = redis.call('HMGET', KEYS[i], 't', 'ts')
  local tokens = tonumber(v[1]) or burst
  local ts = tonumber(v[2]) or now
  if now > ts then
    tokens = math.min(burst, tokens + (now - ts) * per_ms)
    ts = now
  end
  if tokens < cost then
    return {0, math.ceil((cost - tokens) / per_ms), i}
  end
  left[i] = tokens - cost
  stamp[i] = ts
end
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 't', string.format('%.6f', left[i]), 'ts', stamp[i])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {1, 0, 0}
