-- ranks.lua reads the line's length, its admission figures and the rank
-- of each of many sequences in one atomic step (the invariant: one instant
-- for all of them, so later places follow from the count alone), by the
-- rule a poll reads them with (undrawn.lib.lua): before a scheduled drop's
-- draw the pre-queue still to be drawn counts in the line's length, and in
-- the rank of every join since the opening.
-- KEYS and ARGV (ranksArgs, scripts.go): the line (waiting), the stats
-- hash; the queue's prefix, then the sequences.
-- Returns {waiting, admittedTotal, rate, stock state, SKUs with units
-- left, then each sequence's rank or -1}.
local W, ST = KEYS[1], KEYS[2]
local pre = undrawn(ST, ARGV[1])
local _, waiting = undrawnAhead(W, '', -1, redis.call('ZCARD', W), pre)
local st = redis.call('HMGET', ST, 'admittedTotal', 'rate', 'stock', 'skus')
local out = {waiting, st[1] or '0', st[2] or '0', st[3] or '', st[4] or ''}
for i = 2, #ARGV do
  local rank = redis.call('ZRANK', W, ARGV[i])
  if rank then rank = undrawnAhead(W, ARGV[i], rank, 0, pre) else rank = -1 end
  out[i + 4] = rank
end
return out
