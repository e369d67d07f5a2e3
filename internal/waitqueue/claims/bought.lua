-- bought.lua counts the units of entry seq's PAID order against its user's
-- maxPerUser, once (the invariant: the entry's 'counted'): the order worker
-- calls it before the order shows PAID, so that a shopper who sees PAID and
-- joins again is refused, and the orders follower, applying the completed
-- event later, counts it only if this did not (the entry's 'counted'). An
-- entry that is not the order's (gone, or another order's) counts nothing
-- here: the follower does. A follower that applies the event only after the
-- entry's tombstone expired (TombstoneTTL behind) would count it a second
-- time: the limit errs towards refusing, and the store's own per-user check
-- stays exact.
-- ARGV from 3 (boughtArgs, scripts.go): seq, orderId, user, quantity,
-- seconds the count is kept.
-- Returns 1 if it counted.
local seq, ord, user, qty, keep = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local e = P .. 'e:' .. seq
if redis.call('HGET', e, 'orderId') ~= ord or redis.call('HSETNX', e, 'counted', 1) == 0 then return 0 end
local bk = P .. 'b:' .. user
redis.call('INCRBY', bk, qty)
redis.call('EXPIRE', bk, keep)
return 1
