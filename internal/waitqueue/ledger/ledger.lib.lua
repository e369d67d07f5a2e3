-- ledger.lib.lua is the prologue of the stock ledger's scripts (see
-- package ledger), which all run on the ledger's one node and keep its
-- invariant: what every queue sharing a SKU may hold never exceeds its
-- units. KEYS[1] is the queue's record (keyspace.StockShare); ARGV[1] the
-- ledger's prefix, ARGV[2] the request as JSON (ledgerRequest, ledger.go:
-- one struct for every ledger script, each reading the fields it needs).
--
-- record(q) reads queue q's record: {reported (a snapshot is recorded),
-- at (when, ms), tick (its tick length, ms), admitted, waiting, reserved
-- (units of its reservations on the way), claimed = {sku = units},
-- placed = {sku = units}}. The record's fields: res, ver (the snapshot's
-- order, see the snapshot type), next (the last reservation id given),
-- admitted, waiting, skus (comma separated), at, tick, c:<sku> and p:<sku>
-- (claimed and placed units), r:<id> (a reservation's units).
local L, req = ARGV[1], cjson.decode(ARGV[2])
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function record(q)
  local r = {reported = false, at = 0, tick = 0, admitted = 0, waiting = 0, reserved = 0, claimed = {}, placed = {}}
  local flat = redis.call('HGETALL', L .. 'q:' .. q)
  for i = 1, #flat, 2 do
    local f, v = flat[i], tonumber(flat[i + 1])
    local kind, name = string.match(f, '^(%a):(.+)$')
    if kind == 'c' then r.claimed[name] = v
    elseif kind == 'p' then r.placed[name] = v
    elseif kind == 'r' then r.reserved = r.reserved + v
    elseif f == 'at' then r.at, r.reported = v, true
    elseif f == 'tick' or f == 'admitted' or f == 'waiting' then r[f] = v
    end
  end
  return r
end
