-- commit.lua records the decision of window w.
--
-- KEYS: limit. ARGV: w, fingerprint, state TTL in seconds, then field,
-- value pairs. Returns 1 when recorded, 0 when window w (or a later one)
-- was decided already or the controller restarted meanwhile.
-- Invariant: one decision per window, and never an older one over a newer.
local f = redis.call('HMGET', KEYS[1], 'window', 'fp')
if f[2] ~= ARGV[2] or tonumber(f[1] or '0') >= tonumber(ARGV[1]) then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'window', ARGV[1], 'at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
