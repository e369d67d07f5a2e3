-- closed_since.lua records when a queue closed, on Redis time.
-- Invariant: the first admitter to see the queue closed sets the time
-- (HSETNX); later calls read it, and reopening forgets it.
-- KEYS: stats. ARGV (closedSinceArgs, scripts.go): closed (0|1). Returns
-- the closing time in ms, 0 when open.
if ARGV[1] ~= '1' then
  redis.call('HDEL', KEYS[1], 'closedAt')
  return 0
end
local t = redis.call('TIME')
redis.call('HSETNX', KEYS[1], 'closedAt', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return tonumber(redis.call('HGET', KEYS[1], 'closedAt'))
