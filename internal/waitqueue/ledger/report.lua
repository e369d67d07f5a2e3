-- report.lua records a line's snapshot (req.snap, see the snapshot
-- type) of queue req.queue, whose ticks are req.tick ms apart (0: as
-- recorded; a claim's report does not know).
-- Invariants: the record holds the latest snapshot the line took, never
-- one that a later one overtook on the way; a reservation is released
-- once the record holds a snapshot the line took after using it (its id
-- at or below the snapshot's res: that snapshot counts its admissions);
-- each SKU's units are the latest version any report carried (the line
-- reads the store's figure and its own placements in one step, so a
-- snapshot that no longer counts a placed order's claim carries a figure
-- without its units); reservation ids keep counting up past whatever the
-- line used (after the ledger lost its record).
local q, rk, snap = req.queue, KEYS[1], req.snap
if type(snap.skus) ~= 'table' then snap.skus = {} end
for name, s in pairs(snap.skus) do
  if type(s.avail) == 'number' then
    local had = tonumber(redis.call('HGET', L .. 'avail', name .. ':v') or '-1')
    if s.ver > had then redis.call('HSET', L .. 'avail', name, s.avail, name .. ':v', s.ver) end
  end
end
redis.call('EXPIRE', L .. 'avail', req.ttl)
local cur = redis.call('HMGET', rk, 'res', 'ver', 'skus', 'next')
local res, ver = tonumber(cur[1] or '-1'), tonumber(cur[2] or '-1')
if snap.res > res or (snap.res == res and snap.ver > ver) then
  local gone = {}
  for name in string.gmatch(cur[3] or '', '[^,]+') do gone[name] = true end
  for _, f in ipairs(redis.call('HKEYS', rk)) do
    if string.match(f, '^[cp]:') then redis.call('HDEL', rk, f) end
  end
  local names = {}
  for name, s in pairs(snap.skus) do
    names[#names + 1] = name
    gone[name] = nil
    redis.call('HSET', rk, 'c:' .. name, s.claimed, 'p:' .. name, s.placed)
    redis.call('HSET', L .. 'sku:' .. name, q, 1)
    redis.call('EXPIRE', L .. 'sku:' .. name, req.ttl)
  end
  for name in pairs(gone) do redis.call('HDEL', L .. 'sku:' .. name, q) end
  table.sort(names)
  redis.call('HSET', rk, 'res', snap.res, 'ver', snap.ver, 'admitted', snap.admitted, 'waiting', snap.waiting,
    'skus', table.concat(names, ','), 'at', now())
  if req.tick > 0 then redis.call('HSET', rk, 'tick', req.tick) end
  res = snap.res
end
for _, f in ipairs(redis.call('HKEYS', rk)) do
  local id = string.match(f, '^r:(%d+)$')
  if id and tonumber(id) <= res then redis.call('HDEL', rk, f) end
end
if tonumber(cur[4] or '0') < res then redis.call('HSET', rk, 'next', res) end
redis.call('EXPIRE', rk, req.ttl)
return 1
