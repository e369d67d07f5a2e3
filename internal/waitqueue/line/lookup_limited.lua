-- lookup_limited.lua decides a join's rate limits (ratelimit's gcra) and
-- looks its user up in one step: a join's one round trip before its
-- publish, where two were. Invariant: those of gcra — a request the
-- limits refuse is charged to none of them — and of lookup.lua.
-- KEYS (lookupLimitedArgs, scripts.go): the user's pointer, the user's
-- bought count, then the limits' keys.
-- ARGV: prefix, then the limits' arguments (ratelimit.Plan).
-- Returns lookup's three fields, then gcra's.
local lk = {}
for i = 3, #KEYS do lk[i - 2] = KEYS[i] end
local la = {}
for i = 2, #ARGV do la[i - 1] = ARGV[i] end
local out = lookup(KEYS[1], KEYS[2], ARGV[1])
for _, v in ipairs(gcra(lk, la)) do out[#out + 1] = v end
return out
