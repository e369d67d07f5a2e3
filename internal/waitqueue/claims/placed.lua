-- placed.lua records that the store placed the order of entry seq (its
-- units are out of the store's stock figure now, no longer held by the
-- line) together with the stock the store reported, in one step.
-- Invariant: the order's units stop counting as held (HELD: 'p') in the
-- step that records the store's figure without them, so they never count
-- twice on the line, nor not at all.
-- ARGV from 3: seq, orderId, sku, available, version.
local e = P .. 'e:' .. ARGV[3]
if redis.call('HGET', e, 'orderId') == ARGV[4] then
  redis.call('HSET', e, 'placed', 1)
  syncHeld(ARGV[3])
end
setStock(ARGV[5], ARGV[6], ARGV[7])
return 1
