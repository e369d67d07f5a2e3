-- placed.lua records that the store placed the order of entry seq (its
-- units are out of the store's stock figure now, no longer held by the
-- line) together with the stock the store reported, in one step.
-- Invariant: the order's units stop counting as held (HELD: 'p') in the
-- step that records the store's figure without them, so they never count
-- twice on the line, nor not at all.
-- ARGV from 3 (placedArgs, scripts.go): seq, orderId, sku, available,
-- version.
local seq, ord, sku, avail, ver = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local e = P .. 'e:' .. seq
if redis.call('HGET', e, 'orderId') == ord then
  redis.call('HSET', e, 'placed', 1)
  syncHeld(seq)
end
setStock(sku, avail, ver)
return 1
