-- leave_recorded.lua is the step once the entries stream stored shoppers'
-- leaves (see leave.lua): the gateway's after its own record, the
-- admitter's after recording what a gateway could not. Invariant: the slot
-- a left entry kept is freed only after its leave is recorded, and once:
-- the first caller forgets the leave and frees it (leaveRecorded,
-- lib.lua); a repeat changes nothing.
-- ARGV from 3 (recordedArgs, scripts.go): pairs of seq, user.
for i = 3, #ARGV, 2 do leaveRecorded(ARGV[i], ARGV[i + 1]) end
return 1
