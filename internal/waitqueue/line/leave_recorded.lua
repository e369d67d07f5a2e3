-- leave_recorded.lua is the gateway's step once the entries stream stored
-- a shopper's leave (see leave.lua). Invariant: the slot the left entry
-- kept is freed only after its leave is recorded, and once: the first
-- caller forgets the leave and frees it (leaveRecorded, lib.lua); a
-- repeat, or the admitter having done it first, changes nothing.
-- ARGV from 3 (leaveArgs, scripts.go): seq, user.
leaveRecorded(ARGV[3], ARGV[4])
return 1
