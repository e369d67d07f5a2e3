-- use.lua is a pass's check at the proxy gate: whether the entry the pass
-- was issued for still holds its slot, recording the use for the idle
-- sweep (sweep.lua).
-- Invariant: a use is recorded (the entry's score in the passes set, on
-- Redis's clock) only for an entry of the pass's user that holds its slot
-- now — admitted and before its expiresAt, or used by an order in flight;
-- an entry that no longer holds its slot leaves the set in the same step,
-- so the sweep never frees a slot that is not a pass's. It changes
-- nothing else.
-- KEYS: the passes set. ARGV (useArgs, scripts.go): prefix, seq, user.
-- Returns {status, tokenId, readyAt, expiresAt}: status is the record's
-- (admitted, used, expired, left…), 'expired' for an admitted one past
-- its expiresAt that the tick has not expired yet, 'gone' with no record,
-- 'other' for another user's record.
local prefix, seq, user = ARGV[1], ARGV[2], ARGV[3]
local r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'user', 'tokenId', 'readyAt', 'expiresAt')
local st = r[1] or 'gone'
if r[1] and r[2] ~= user then st = 'other' end
local t = once('time', function() return redis.call('TIME') end)
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if st == 'admitted' and tonumber(r[5] or '0') <= now then st = 'expired' end
if st == 'admitted' or st == 'used' then
  redis.call('ZADD', KEYS[1], now, seq)
elseif st ~= 'other' then
  redis.call('ZREM', KEYS[1], seq)
end
return {st, r[3] or '', r[4] or '', r[5] or ''}
