-- leave.lua is the gateway's leave (the follower applies the leave event
-- too). Invariant: the entry leaves the line, or frees its slot, in the
-- step that marks it left, and leaving twice is harmless (see leave in
-- lib.lua). ARGV from 3 (leaveArgs, scripts.go): seq, user. Returns the
-- status the entry had.
return leave(ARGV[3], ARGV[4])
