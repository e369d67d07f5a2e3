-- withdraw.lua takes queue req.queue out of the ledger: it no longer
-- follows stock, or it was deleted. Invariant: no queue counts its
-- holdings any more, and its reservation ids keep counting up.
local rk = KEYS[1]
for name in string.gmatch(redis.call('HGET', rk, 'skus') or '', '[^,]+') do
  redis.call('HDEL', L .. 'sku:' .. name, req.queue)
end
for _, f in ipairs(redis.call('HKEYS', rk)) do
  if f ~= 'next' then redis.call('HDEL', rk, f) end
end
return 1
