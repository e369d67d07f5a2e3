-- ingest.lua is the gateway's own ingest of the join it just published,
-- ahead of the admitter's follower, so the answer carries the exact place.
-- Invariant: those of join (lib.lua) — a sequence is in line once, a
-- user's live entry is kept, nobody moves back — and it does not move the
-- cursor: only the follower, applying the stream in order, knows
-- everything before a sequence is in line.
-- ARGV from 3 (ingestArgs, scripts.go): epoch (the entries stream's
-- identity), seq, user, prev, kind (see join) and form: '0', seq is the
-- join's place; '1', seq is a usher.joined.v1 message's stream sequence,
-- put at its place (placeOf, lib.lua) by the queue's first usher.joins.v2
-- message as far as the line has applied the stream. (A usher.joins.v2
-- message's joins go in line together: ingest_group.lua.)
-- Returns {status, seq of the live entry, rank or -1, waiting count, rate,
-- stock state, SKUs with units left, the join's place} (the line's figures
-- a poll answers too, so a join's answer is the view a poll would give), or
-- {'stale'} when the line belongs to another incarnation of the stream, or
-- {'conflict'} when the sequence's record names another user.
-- A batch of a queue's joins reads the line's identity, figures and
-- undrawn pre-queue once (script.New's once): no join changes the first two,
-- and one into the pre-queue forgets the third.
local cur = once('epoch ' .. C, function() return redis.call('HMGET', C, 'entries.id', 'entries.v2') end)
local had = cur[1]
if had and had ~= ARGV[3] then return {'stale'} end
local seq = ARGV[4]
if ARGV[8] == '1' then seq = placeOf(tonumber(seq), 0, tonumber(cur[2] or '0')) end
local live, st = join(seq, ARGV[5], ARGV[6], ARGV[7], '0') -- just stored: now
if not live then return {'conflict'} end
if st == 'pre' then forget('undrawn ' .. ST) end
local rank = redis.call('ZRANK', W, live)
if not st then st = redis.call('HGET', P .. 'e:' .. live, 'status') end
if st == 'pre' and rank then st = 'waiting' end -- drawn, not settled yet (see drawScript)
local stats = once('stats ' .. ST, function() return redis.call('HMGET', ST, 'rate', 'stock', 'skus') end)
local waiting = redis.call('ZCARD', W)
if st ~= 'pre' then
  rank, waiting = undrawnAhead(W, live, rank or -1, waiting, once('undrawn ' .. ST, function() return undrawn(ST, P) end))
end
return {st or 'unknown', live, rank or -1, waiting, stats[1] or '0', stats[2] or '', stats[3] or '', seq}
