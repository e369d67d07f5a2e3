-- stock.lib.lua is the stock-aware line's count of what could still be
-- sold, one function for the tick, the admission at once and the claim,
-- so all count alike at the moment they admit (the invariant they keep:
-- never more unordered shoppers admitted than units that could still be
-- sold). It follows lib.lua.
--
-- ownStock() reads the line's own holdings: each SKU's units as the store
-- last reported them (P..'stock'), and what each slot holds (HELD, see
-- syncHeld): {known (any SKU has a figure), admitted (unordered shoppers,
-- a unit each), pending (placed orders, not final), skus = {sku = {avail,
-- ver, claimed, placed}}}.
--
-- sellableOf(own, share) is what could still go to the next in line: the
-- SKUs' units, less what this line holds and — share being the ledger's
-- figures of the queues it shares its SKUs with (see package ledger; nil:
-- this queue alone) — what those hold. Each SKU's figure is the later of
-- the line's and the ledger's. Returns the units, whether anything is
-- held or pending anywhere (units that may come back), and the SKUs with
-- units left, sorted, with each one's figures for ops
-- ('sku:available:claimed:pending', this line's claims and placements).
local function ownStock()
  local own = {known = false, admitted = 0, pending = 0, skus = {}}
  local function sku(name)
    if not own.skus[name] then own.skus[name] = {ver = 0, claimed = 0, placed = 0} end
    return own.skus[name]
  end
  local rows = redis.call('HGETALL', P .. 'stock')
  for i = 1, #rows, 2 do
    if string.sub(rows[i], -2) == ':v' then
      sku(string.sub(rows[i], 1, -3)).ver = tonumber(rows[i + 1])
    else
      sku(rows[i]).avail = tonumber(rows[i + 1])
      own.known = true
    end
  end
  if redis.call('HLEN', HELD) ~= redis.call('ZCARD', A) then
    -- Slots taken before HELD existed (or lost with it): from the records.
    local slot = {}
    for _, s in ipairs(redis.call('ZRANGE', A, 0, -1)) do
      syncHeld(s)
      slot[s] = true
    end
    for _, s in ipairs(redis.call('HKEYS', HELD)) do
      if not slot[s] then redis.call('HDEL', HELD, s) end
    end
  end
  for _, v in ipairs(redis.call('HVALS', HELD)) do
    if v == 'a' then
      own.admitted = own.admitted + 1
    elseif v ~= 'x' then
      local kind, qty, name = string.match(v, '^(%a):([^:]*):(.*)$')
      qty = tonumber(qty)
      if kind == 'p' then
        own.pending = own.pending + 1
        sku(name).placed = sku(name).placed + qty
      else
        sku(name).claimed = sku(name).claimed + qty
      end
    end
  end
  return own
end
local function sellableOf(own, share)
  local units, busy = 0, own.admitted + own.pending
  local left, figures = {}, {}
  for name, s in pairs(own.skus) do
    local avail, claimed = s.avail, s.claimed
    local other = share and share.skus[name]
    if other then
      if other.avail and (not avail or other.ver > s.ver) then avail = other.avail end
      claimed = claimed + other.claimed
    end
    units = units - claimed
    busy = busy + s.claimed
    if avail then
      units = units + avail
      if avail - claimed > 0 then left[#left + 1] = name end
      figures[#figures + 1] = name .. ':' .. avail .. ':' .. s.claimed .. ':' .. s.placed
    end
  end
  units = units - own.admitted
  if share then
    units = units - share.admitted
    busy = busy + share.busy
  end
  table.sort(left)
  table.sort(figures)
  return units, busy, left, figures
end
-- useReservation records that this step uses the ledger's reservation
-- (share.res) and returns the units it may admit by it, the grant, and
-- false; or none and true when the line used a later reservation already
-- (the ledger may have released this one's units with that step's
-- report: the caller may reserve again). No share: no cap (nil).
local function useReservation(share)
  if not share then return nil, false end
  if share.res <= tonumber(redis.call('HGET', ST, 'stockRes') or '0') then return 0, true end
  redis.call('HSET', ST, 'stockRes', share.res)
  return share.grant, false
end
-- snapshotOf is what the line holds after the step, for the ledger (see
-- the snapshot type of the stock ledger), as JSON. An order that names no
-- SKU (redeemed by the order worker without the gateway's claim) holds a
-- unit of any SKU of the queue, as an unordered shopper does.
local function snapshotOf(own)
  local skus, admitted = {}, own.admitted
  for name, s in pairs(own.skus) do
    if name == '' then
      admitted = admitted + s.claimed
    else
      skus[name] = {avail = s.avail, ver = s.ver, claimed = s.claimed, placed = s.placed}
    end
  end
  return cjson.encode({ver = redis.call('HINCRBY', ST, 'stockSnap', 1),
    res = tonumber(redis.call('HGET', ST, 'stockRes') or '0'),
    admitted = admitted, waiting = redis.call('ZCARD', W), skus = skus})
end
-- shareOf decodes the ledger's figures the caller passed ('': none).
local function shareOf(arg)
  if not arg or arg == '' then return nil end
  local share = cjson.decode(arg)
  if type(share.skus) ~= 'table' then share.skus = {} end
  for _, s in pairs(share.skus) do
    if type(s.avail) ~= 'number' then s.avail = nil end
  end
  return share
end
