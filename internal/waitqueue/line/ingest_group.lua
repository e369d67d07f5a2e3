-- ingest_group.lua is the gateway's own ingest of a usher.joins.v2 message
-- it just published, ahead of the admitter's follower: every join the
-- message lists, in one step, so each answer carries its exact place.
-- Invariant: those of ingest.lua, join by join in the message's order —
-- a place is in line once, a user's live entry is kept, nobody moves back, the
-- cursor stays where the follower left it. The joins' writes to the line,
-- the pointers and presence are held back and made once for the group
-- (join's buffer, lib.lua): the shard's cost of a crowd is per group.
-- ARGV from 3 (ingestGroupArgs, scripts.go): epoch (the entries stream's
-- identity), seq (the message's stream sequence), then for each join in
-- the message's order: user, prev, kind (see join). The queue's joins
-- count in groups from this message at the latest (placeOf, lib.lua).
-- Returns {'stale'} when the line belongs to another incarnation of the
-- stream, else one reply per join: ingest.lua's {status, seq of the live
-- entry, rank or -1, waiting count, rate, stock state, SKUs with units
-- left, the join's place}, or {'conflict'} when the place's record names
-- another user. The figures are the line's once the whole group is in it.
local cur = redis.call('HMGET', C, 'entries.id', 'entries.v2')
if cur[1] and cur[1] ~= ARGV[3] then return {'stale'} end
local s = tonumber(ARGV[4])
local v2 = tonumber(cur[2] or '0')
if v2 == 0 then v2 = s end
local buf = newGroup()
local joined = {}
for i = 0, (#ARGV - 4) / 3 - 1 do
  local a = 5 + 3 * i
  local place = placeOf(s, i, v2)
  local live, st = join(place, ARGV[a], ARGV[a + 1], ARGV[a + 2], '0', buf) -- just stored: now
  joined[i + 1] = {live, st, place}
end
flushGroup(buf)
local stats = redis.call('HMGET', ST, 'rate', 'stock', 'skus')
local total = redis.call('ZCARD', W)
local pre = undrawn(ST, P)
local out = {}
for i, j in ipairs(joined) do
  local live, st = j[1], j[2]
  if not live then
    out[i] = {'conflict'}
  else
    local rank = redis.call('ZRANK', W, live)
    if not st then st = redis.call('HGET', P .. 'e:' .. live, 'status') end
    if st == 'pre' and rank then st = 'waiting' end -- drawn, not settled yet (see drawScript)
    local waiting = total
    if st ~= 'pre' then rank, waiting = undrawnAhead(W, live, rank or -1, total, pre) end
    out[i] = {st or 'unknown', live, rank or -1, waiting, stats[1] or '0', stats[2] or '', stats[3] or '', j[3]}
  end
end
return out
