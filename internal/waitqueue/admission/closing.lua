-- closing.lua reads how far a closed queue's closing has gone in one
-- step on the queue's node. It only reads. Invariant: the closing time,
-- the clock, the slots held and the last one's expiry are one instant's.
-- KEYS: the stats hash, the active set.
-- Returns {closedAt ms or 0, now ms, held, the last slot's expiry ms or 0}.
local t = redis.call('TIME')
local last = redis.call('ZRANGE', KEYS[2], 0, 0, 'REV', 'WITHSCORES')
return {tonumber(redis.call('HGET', KEYS[1], 'closedAt') or '0'),
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
  redis.call('ZCARD', KEYS[2]), tonumber(last[2] or '0')}
