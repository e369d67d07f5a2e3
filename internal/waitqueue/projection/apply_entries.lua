-- apply_entries.lua applies join and leave events of USHER_ENTRIES in
-- stream order. ARGV after apply.head.lua's (entriesArgs, scripts.go):
-- groups of six: stream seq, kind (j: join | p: join into the pre-queue |
-- a: join allowed past the line | l: leave | x: nothing, an event that
-- could not be read), for a join its index in a usher.joins.v2 message
-- (-1: the one join of a usher.joined.v1 message) and for a leave the
-- entry it leaves, user, prev (the join's previous entry, see join) or a
-- leave's reason, and when the stream stored the event (ms; 0: unknown).
-- A usher.joins.v2 message comes as one group per join, all with its
-- stream seq, in one call.
-- Invariants: an event at or below the cursor has been applied and is
-- skipped; every join of a message is applied in the same step; a join's
-- entry id is its place (placeOf, lib.lua), counted from the queue's first
-- usher.joins.v2 message, whose sequence the cursor hash keeps
-- ('entries.v2') and moves with the cursor in the same step, so a follower
-- that starts again from the cursor gives every join the same id.
-- Returns {'ok', cursor, conflicts} | {'rewound', cursor, 0} | {'stale', 0, 0}.
local v2 = 0
if had == sid then v2 = tonumber(redis.call('HGET', C, 'entries.v2') or '0') end
local from, v2was = at, v2
for i = 6, #ARGV, 6 do
  local s = tonumber(ARGV[i])
  if s > from then
    local kind = ARGV[i+1]
    if kind == 'j' or kind == 'p' or kind == 'a' then
      if kind == 'j' then kind = '' end
      local index = tonumber(ARGV[i+2])
      if index >= 0 and v2 == 0 then v2 = s end
      local entry = placeOf(s, math.max(index, 0), v2)
      if not join(entry, ARGV[i+3], ARGV[i+4], kind, ARGV[i+5]) then conflicts = conflicts + 1 end
    elseif kind == 'l' then
      leave(ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5])
    end
    at = s
  end
end
if v2 ~= v2was then redis.call('HSET', C, 'entries.v2', v2) end
