-- record_window.lua adds a sample to the queue's current window.
--
-- KEYS: the queue's limit key (it routes the call to the queue's slot;
-- the window's key is derived from the prefix, same slot). ARGV: prefix,
-- window ms, the window key's TTL in seconds, then triples: '+' (add) or
-- 'max', field, integer value.
-- Invariant: a window's figures only grow; the key lives OrderWindowTTL
-- after its last sample.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local k = ARGV[1] .. 'ow:' .. string.format('%d', math.floor(now / tonumber(ARGV[2])))
for i = 4, #ARGV, 3 do
  if ARGV[i] == '+' then
    redis.call('HINCRBY', k, ARGV[i+1], ARGV[i+2])
  elseif tonumber(ARGV[i+2]) > tonumber(redis.call('HGET', k, ARGV[i+1]) or '0') then
    redis.call('HSET', k, ARGV[i+1], ARGV[i+2])
  end
end
redis.call('EXPIRE', k, ARGV[3])
return 1
