-- release.lua frees the slot of a used entry once its order is final.
-- ARGV from 3 (releaseArgs, scripts.go): seq, orderId.
-- Invariant: only the order that used the entry frees its slot, and
-- freeing twice is harmless. Returns 1 if a slot was freed.
local seq, ord = ARGV[3], ARGV[4]
local e = P .. 'e:' .. seq
local f = redis.call('HMGET', e, 'orderId', 'user')
if f[1] ~= ord then return 0 end
finish(e, seq, f[2])
redis.call('HDEL', HELD, seq)
return redis.call('ZREM', A, seq)
