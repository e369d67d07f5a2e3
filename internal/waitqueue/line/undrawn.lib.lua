-- undrawn.lib.lua counts a scheduled drop's pre-queue in the line before the
-- draw: the draw puts it ahead of every join made since the opening (scores
-- from 1, their sequences) and behind those allowed past the line (negative
-- scores; see draw.lua), so such a join is told the place it will have,
-- not "1 of 1" and, at the draw, one as far back as the pre-queue is long.
-- Invariant: it is the one rule for the line's length and a place in it, whoever
-- reads them — a poll, a join's answer, the notifier's ranks (ranks.lua):
-- the length counts the pre-queue still to be drawn for every entry told
-- one but a pre-queued entry itself (an admitted shopper heads that line, a
-- join not applied yet is at its back), and a place counts it when it lies
-- ahead. Once drawn, or with no pre-queue, nothing changes.
-- undrawn(ST, prefix) is the pre-queue still to be drawn;
-- undrawnAhead(W, seq, rank, waiting, pre) returns rank (-1: not in line)
-- and waiting with it counted in.
local function undrawn(st, prefix)
  if redis.call('HEXISTS', st, 'drawn') == 1 then return 0 end
  return redis.call('ZCARD', prefix .. 'pre')
end
local function undrawnAhead(w, seq, rank, waiting, pre)
  if pre == 0 then return rank, waiting end
  if rank >= 0 and tonumber(redis.call('ZSCORE', w, seq)) > 0 then rank = rank + pre end
  return rank, waiting + pre
end
