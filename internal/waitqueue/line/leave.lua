-- leave.lua is the gateway's leave: the line first, the entries stream
-- after (the follower applies the stored event again, which changes
-- nothing). Invariants: the entry leaves the line in the step that marks
-- it left, and leaving twice is harmless (see leave in lib.lua); a leave
-- that took effect waits in LEAVING until the stream stores it — the
-- gateway stores it, the admitter stores what a gateway could not, and
-- either then runs leave_recorded.lua — so the stream holds a shopper's
-- leave only if it took effect, which is before any claim of the token
-- (the claim script refuses a left entry). A leave that finds the token
-- used — an order's claim came first — records nothing: the order stands,
-- live and in a replay, which applies the stream's leaves before its
-- requests and so must not meet a leave the line never took. An admitted
-- entry keeps its slot until its leave is recorded (leaveRecorded frees
-- it), so no slot is given again before the stream says it was given
-- back: what the audits reconstruct from the streams is never less than
-- what the line held.
-- ARGV from 3 (leaveArgs, scripts.go): seq, user. Returns {the status the
-- entry had, 1 while its leave is still to be stored, else 0}.
local seq, user = ARGV[3], ARGV[4]
local member = leavingMember(seq, user)
local had = leave(seq, user, '', nil, true)
if had == 'waiting' or had == 'pre' or had == 'admitted' or had == 'unknown' then
  redis.call('ZADD', LEAVING, seq, member)
  return {had, 1}
end
if redis.call('ZSCORE', LEAVING, member) then return {had, 1} end
return {had, 0}
