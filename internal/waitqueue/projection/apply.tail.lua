-- apply.tail.lua ends every apply_*.lua script. Invariant: the cursor
-- moves to the last event applied in the same atomic step as the events'
-- effects.
redis.call('HSET', C, field, at, field .. '.id', sid)
return {'ok', at, conflicts}
