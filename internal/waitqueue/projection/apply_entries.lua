-- apply_entries.lua applies join and leave events of USHER_ENTRIES in
-- stream order. ARGV after apply.head.lua's (entriesArgs, scripts.go):
-- groups of six: stream seq, kind (j: join | p: join into the pre-queue |
-- a: join allowed past the line | l: leave | x: nothing, an event that
-- could not be read), entry seq, user, prev (the join's previous entry,
-- see join) or a leave's reason, and when the stream stored the event (ms;
-- 0: unknown).
-- Invariant: an event at or below the cursor has been applied and is
-- skipped; the cursor moves to the last event in the same step.
-- Returns {'ok', cursor, conflicts} | {'rewound', cursor, 0} | {'stale', 0, 0}.
for i = 6, #ARGV, 6 do
  local s = tonumber(ARGV[i])
  if s > at then
    local kind = ARGV[i+1]
    if kind == 'j' or kind == 'p' or kind == 'a' then
      if kind == 'j' then kind = '' end
      if not join(ARGV[i+2], ARGV[i+3], ARGV[i+4], kind, ARGV[i+5]) then conflicts = conflicts + 1 end
    elseif kind == 'l' then
      leave(ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5])
    end
    at = s
  end
end
