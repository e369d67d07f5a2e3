-- draw.lua makes the lottery's order the line, in one step: a crash
-- leaves either no draw or all of it. The order was staged before, outside
-- it (prefix..'draw': the pre-queued sequences, scored by place / (n + 1),
-- written in batches by Drop.Draw), so Redis is busy only for the
-- checks below, each O(1) or O(log n), and the few joins made since the
-- opening: the staged set becomes the line by RENAME.
-- ARGV from 3 (drawArgs, scripts.go): epoch (the entries stream's
-- identity), the order's digest (kept for the reveal), n (how many were
-- staged), the pre-queue's version when it was read (every change of the
-- pre-queue counts it up), upTo (0: the entries cursor; else the cursor of
-- the draw being redone after Redis lost it — see Drop.Redraw — whose later
-- pre-queue joins queue FIFO, as they did the first time).
-- Invariants: the draw happens once; it places exactly the pre-queue of
-- the entries cursor — every pre-queue join the follower applied, nothing
-- the gateway put in ahead of it — so that anyone can recompute it from
-- the stream up to that cursor: a staged order that is not exactly the
-- pre-queue (someone joined or left since it was read) is refused and
-- staged again. The drawn get places 1..n, ahead of every join made after
-- the opening (scores below 1, where a FIFO place's score is its
-- sequence) and behind those allowed past the line (negative scores).
-- The drawn records keep status 'pre' until settle_draw.lua passes; every
-- script reads a 'pre' record with a place in line as waiting.
-- Returns n, -1 when the queue was drawn already, -2 when the staged order
-- is not the pre-queue of the cursor.
local epoch, digest, n, version, upTo = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
if redis.call('HGET', ST, 'drawn') then return -1 end
local pre, stage = P .. 'pre', P .. 'draw'
-- The pre-queue's members are entry ids, the cursors stream sequences:
-- members are compared with the place bound of a cursor (placeBound).
local c = redis.call('HMGET', C, 'entries', 'entries.id', 'entries.v2')
local cursor, v2 = 0, 0
if c[2] == epoch then cursor, v2 = tonumber(c[1] or '0'), tonumber(c[3] or '0') end
if (redis.call('HGET', ST, 'preVersion') or '0') ~= version then return -2 end
local current = upTo == 0
if current then
  upTo = cursor
elseif cursor < upTo then
  return -2
end
local bound = placeBound(upTo, v2)
if current and #redis.call('ZRANGEBYSCORE', pre, string.format('(%.0f', bound), '+inf', 'LIMIT', 0, 1) > 0 then
  return -2
end
if redis.call('ZCOUNT', pre, '-inf', bound) ~= n or redis.call('ZCARD', stage) ~= n then return -2 end
if n > 0 then
  local w = redis.call('ZRANGE', W, 0, -1, 'WITHSCORES')
  for i = 1, #w, 2 do redis.call('ZADD', stage, w[i + 1], w[i]) end
  redis.call('RENAME', stage, W)
end
for _, seq in ipairs(redis.call('ZRANGEBYSCORE', pre, string.format('(%.0f', bound), '+inf')) do
  redis.call('HSET', P .. 'e:' .. seq, 'status', 'waiting')
  redis.call('ZADD', W, tonumber(seq), seq)
  redis.call('ZREM', pre, seq)
end
redis.call('HSET', ST, 'drawn', n, 'drawCursor', upTo, 'drawDigest', digest, 'drawnAt', now())
return n
