-- poll.lua reads everything a poll answers in one round trip and, when
-- asked (a shopper's own poll), records that a waiting shopper is present
-- (see admit.lua: abandonment) — unless it recorded them present less
-- than the granularity ago: presence is read at the scale of the
-- abandonment window, and a write costs the shard a replicated command
-- (AOF, replicas) that the reads it sits between do not.
-- Invariant: the place, the line's length and its figures are read in
-- one step, by the rule undrawn.lib.lua keeps for every reader; the only
-- write is the presence of a waiting shopper (ZADD XX GT: never adds
-- anyone, never moves a time back).
-- KEYS: the line's six (see lib.lua). ARGV (pollArgs, scripts.go): prefix,
-- seq, the presence granularity in ms (0: not the shopper's own poll,
-- record nothing).
-- A sequence without a record is 'unknown' while the entries cursor has
-- not reached it (joined, not applied yet) and 'gone' after (its tombstone
-- expired).
-- Returns {status, seq, rank, waiting, readyAt, expiresAt, tokenId, user,
-- rate, stock state, SKUs with units left, reason}.
local prefix, seq = ARGV[1], ARGV[2]
local r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'readyAt', 'expiresAt', 'tokenId', 'user', 'reason', 'alias')
if r[7] then
  seq = r[7]
  r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'readyAt', 'expiresAt', 'tokenId', 'user', 'reason')
end
local st = r[1]
if not st then
  -- The cursor is a stream sequence; the highest entry id it covers is
  -- its place bound (event.PlaceBound), past the queue's first
  -- usher.joins.v2 message ('entries.v2').
  local c = redis.call('HMGET', KEYS[6], 'entries', 'entries.v2')
  st = 'unknown'
  if c[1] then
    local bound, v2 = tonumber(c[1]), tonumber(c[2] or '0')
    if v2 > 0 and bound >= v2 then bound = bound * 1024 + 1023 end
    if tonumber(seq) <= bound then st = 'gone' end
  end
end
local every = tonumber(ARGV[3])
if every > 0 and (st == 'waiting' or st == 'pre') then
  local t = once('time', function() return redis.call('TIME') end)
  local n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last = tonumber(redis.call('ZSCORE', prefix .. 'seen', seq) or n)
  if n - last >= every then redis.call('ZADD', prefix .. 'seen', 'XX', 'GT', n, seq) end
end
local rank = -1
if st == 'waiting' or st == 'pre' then rank = redis.call('ZRANK', KEYS[1], seq) or -1 end
if st == 'pre' and rank >= 0 then st = 'waiting' end -- drawn, not settled yet (see drawScript)
-- The line's length and figures: polls change neither, so a batch of
-- polls of one queue reads them once (see script.New).
local stats = once('stats ' .. KEYS[4], function() return redis.call('HMGET', KEYS[4], 'rate', 'stock', 'skus') end)
local waiting = once('waiting ' .. KEYS[1], function() return redis.call('ZCARD', KEYS[1]) end)
if st ~= 'pre' then
  local pre = once('undrawn ' .. KEYS[1], function() return undrawn(KEYS[4], prefix) end)
  rank, waiting = undrawnAhead(KEYS[1], seq, rank, waiting, pre)
end
return {st, seq, rank, waiting,
  r[2] or '', r[3] or '', r[4] or '', r[5] or '', stats[1] or '0', stats[2] or '', stats[3] or '', r[6] or ''}
