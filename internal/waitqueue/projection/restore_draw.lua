-- restore_draw.lua records a draw that Redis lost, as draw.lua did:
-- the stats hash's drawn, drawCursor and drawDigest. Invariant: a draw is
-- recorded once; one recorded already is never changed.
-- KEYS: the stats hash. ARGV (restoreDrawArgs, scripts.go): n, cursor,
-- digest. Returns 1 if written.
if redis.call('HEXISTS', KEYS[1], 'drawn') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'drawn', ARGV[1], 'drawCursor', ARGV[2], 'drawDigest', ARGV[3])
return 1
