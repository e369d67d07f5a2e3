-- apply.head.lua starts every apply_*.lua script (after lib.lua) and keeps
-- their shared invariant: nothing is applied to a line that lost writes
-- or belongs to another incarnation of the stream. prev is the last stream
-- sequence the follower applied (or where it started); if the cursor is
-- behind it, Redis lost writes since, and the follower must start again
-- from the cursor. apply.tail.lua ends the script.
-- ARGV from 3 (applyStart, scripts.go): stream field, stream id, prev,
-- then the script's own.
local field, sid, prev = ARGV[3], ARGV[4], tonumber(ARGV[5])
local at, had = cursorAt(field, sid)
if field == 'entries' and had and had ~= sid then return {'stale', 0, 0} end
if at < prev then return {'rewound', at, 0} end
local conflicts = 0
