-- set_stock.lua records the stock of SKUs as the store reported them.
-- Invariant: a SKU's figure only moves to a later version (see setStock
-- in lib.lua); with only, the line keeps no figure of a SKU the queue no
-- longer sells.
-- ARGV from 3 (setStockArgs, scripts.go): only (1: these are all the queue's SKUs; others
-- recorded are dropped), then groups of three: sku, available, version.
local k = P .. 'stock'
local keepSkus = {}
for i = 4, #ARGV, 3 do
  setStock(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  keepSkus[ARGV[i]] = true
end
if ARGV[3] == '1' then
  local rows = redis.call('HKEYS', k)
  for _, f in ipairs(rows) do
    local sku = f
    if string.sub(f, -2) == ':v' then sku = string.sub(f, 1, -3) end
    if not keepSkus[sku] then redis.call('HDEL', k, f) end
  end
end
return 1
