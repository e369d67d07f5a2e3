-- release.lua frees the slot of a used entry once its order is final.
-- ARGV from 3: seq, orderId.
-- Invariant: only the order that used the entry frees its slot, and
-- freeing twice is harmless. Returns 1 if a slot was freed.
local e = P .. 'e:' .. ARGV[3]
local f = redis.call('HMGET', e, 'orderId', 'user')
if f[1] ~= ARGV[4] then return 0 end
finish(e, ARGV[3], f[2])
redis.call('HDEL', HELD, ARGV[3])
return redis.call('ZREM', A, ARGV[3])
