-- reserve.lua reserves units for one admission step of queue req.queue,
-- which sells req.skus and shares them with req.peers (the catalog's) and
-- any queue that reported one of them lately (within two of its ticks and
-- a second). req.want: the most the step may admit.
-- Invariant: what every queue sharing the SKUs may hold — each one's last
-- report, its reservations on the way, and this grant — never exceeds the
-- SKUs' units less their claims; while other lines wait too, one step gets
-- no more than an even share of what is left, so no line takes every unit
-- for a step that admits one; a peer that never reported gets nobody a
-- grant.
-- Returns the reservation (see the reservation type) as JSON: the id
-- counts up, grant or none.
local q, rk = req.queue, KEYS[1]
local n = now()
local others, blocked = {}, false
for _, p in ipairs(req.peers) do
  if p ~= q then
    local r = record(p)
    if r.reported then others[p] = r else blocked = true end
  end
end
for _, name in ipairs(req.skus) do
  for _, p in ipairs(redis.call('HKEYS', L .. 'sku:' .. name)) do
    if p ~= q and not others[p] then
      local r = record(p)
      if r.reported and n - r.at <= 2 * r.tick + 1000 then others[p] = r end
    end
  end
end
local share = {admitted = 0, busy = 0, skus = {}}
for _, name in ipairs(req.skus) do
  local f = redis.call('HMGET', L .. 'avail', name, name .. ':v')
  share.skus[name] = {avail = tonumber(f[1]), ver = tonumber(f[2] or '0'), claimed = 0}
end
local waitingLines = 1
for _, r in pairs(others) do
  share.admitted = share.admitted + r.admitted + r.reserved
  share.busy = share.busy + r.admitted + r.reserved
  for name, s in pairs(share.skus) do
    s.claimed = s.claimed + (r.claimed[name] or 0)
    share.busy = share.busy + (r.claimed[name] or 0) + (r.placed[name] or 0)
  end
  if r.waiting > 0 then waitingLines = waitingLines + 1 end
end
-- What this queue could take by the ledger's count: its own holdings as
-- it last reported them, with its reservations on the way.
local own = record(q)
local units, known = -(share.admitted + own.admitted + own.reserved), false
for name, s in pairs(share.skus) do
  if s.avail then
    units = units + s.avail
    known = true
  end
  units = units - s.claimed - (own.claimed[name] or 0)
end
local grant = 0
if not blocked and known and units > 0 then
  grant = math.min(req.want, math.ceil(units / waitingLines))
end
share.res = redis.call('HINCRBY', rk, 'next', 1)
share.grant = grant
if grant > 0 then redis.call('HSET', rk, 'r:' .. share.res, grant) end
redis.call('EXPIRE', rk, req.ttl)
return cjson.encode(share)
