-- One token bucket in one hash: a sender's raw-transaction limit, a key's bundle rate.
-- KEYS[1] the bucket (fields t = tokens, ts = ms of the last update)
-- ARGV[1] rate, tokens per second (> 0)   ARGV[2] burst   ARGV[3] cost
-- ARGV[4] now in ms, '' = Redis TIME (tests pass their own clock)
-- returns {allowed 1|0, retry_ms (0 when allowed)}
local now
if ARGV[4] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[4])
end
local per_ms = tonumber(ARGV[1]) / 1000
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(v[1]) or burst
local ts = tonumber(v[2]) or now
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * per_ms)
  ts = now
end
local ttl = math.ceil(burst / per_ms) + 1000
local allowed, retry = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = math.ceil((cost - tokens) / per_ms)
end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'ts', ts)
redis.call('PEXPIRE', KEYS[1], ttl)
return {allowed, retry}
