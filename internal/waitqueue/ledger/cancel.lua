-- cancel.lua releases reservation req.res of queue req.queue, which the
-- line refused before using it (the tick was not due, or a guard of the
-- admission at once held). Invariant: a reservation no step used is
-- released; one a step used stays until the line's report releases it.
redis.call('HDEL', KEYS[1], 'r:' .. req.res)
return 1
