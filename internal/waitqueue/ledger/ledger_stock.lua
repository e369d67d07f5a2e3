-- ledger_stock.lua records SKUs' units as the store reported them
-- (req.levels: {sku, avail, ver}), unless the ledger has a later version.
-- Invariant: a figure newer than the holdings the ledger counts can only
-- count the units placed since twice (gone from the store, still claimed
-- until their queue's next report), never not at all: the reports carry
-- each placement's figure with the holdings that leave it out (see
-- report.lua).
for _, l in ipairs(req.levels) do
  local had = tonumber(redis.call('HGET', L .. 'avail', l.sku .. ':v') or '-1')
  if l.ver > had then redis.call('HSET', L .. 'avail', l.sku, l.avail, l.sku .. ':v', l.ver) end
end
redis.call('EXPIRE', L .. 'avail', req.ttl)
return 1
