-- leaves_recorded.lua is the admitter's step once the entries stream
-- stored shoppers' leaves their gateways did not (see line/leave.lua).
-- Invariant: each slot a left entry kept is freed only after its leave is
-- recorded, and once (leaveRecorded, lib.lua): a leave a gateway finished
-- meanwhile changes nothing. ARGV from 3: pairs of seq, user.
for i = 3, #ARGV, 2 do leaveRecorded(ARGV[i], ARGV[i + 1]) end
return 1
