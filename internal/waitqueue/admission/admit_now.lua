-- admit_now.lua admits the head of the line at once, outside the ticks: a
-- join into an empty line with a slot free (no crowd, no wait), or every
-- join of a passthrough queue.
-- ARGV from 3 (atOnceArgs, scripts.go): queue, epoch, ttlMs, tickMs,
-- stock-aware (0|1), only (a sequence: admit that entry alone if it waits
-- — a passthrough join, where nobody waits and order does not matter; 0:
-- the head of the line), the stock ledger's share for this step (JSON, see
-- package ledger; empty: the queue counts its own holdings alone).
-- Invariants: those of admit.lua, by what the last tick recorded that it
-- obeys (admit.lua's limit, maxTick, paused and awaitDraw: one source,
-- whoever admits) — FIFO up to the entries cursor; never over the tick's
-- limit (for an adaptive queue the controller's, not the configured
-- targetActive); nobody while the tick found admission paused (the
-- queue's state, the payment breaker), nor before a drop's draw (the draw
-- as it stands now: the one that just happened counts); never over the
-- sellable units, counted here and now as a tick counts them (a claim made
-- since the last tick holds its units; see stock.lib.lua) and within the
-- ledger's grant; never more than maxTick in a tick (the head of the line
-- only; counting what the current tick and earlier calls in it admitted:
-- the join that found the line empty may find it full by now — the
-- follower applied joins from other gateways meanwhile, or replayed a
-- whole line Redis had lost — and the head of that line is the ticks' to
-- admit at the configured rate), in one atomic step with the outbox — and
-- nothing while the last tick found the line behind the streams or is
-- older than two ticks and a second (the guards only a tick runs), nor the
-- head of the line while the ticks' last readyAt lies ahead (after
-- catch-up ticks: it would be READY before those admitted ahead of it).
-- What it admits is READY at once: readyAt is Redis's time of the call.
-- Returns {'ok', snapshot, seq...} — the sequences admitted — or {'later',
-- snapshot} when a guard refused (the next tick may lift it, or a fresh
-- reservation: the caller may try again then). snapshot: the line's stock
-- snapshot for the ledger (JSON), empty when this step counted no stock.
local queue, epoch = ARGV[3], ARGV[4]
local ttl, tick = tonumber(ARGV[5]), tonumber(ARGV[6])
local stockAware, only = ARGV[7] == '1', ARGV[8]
local n = now()
local st = redis.call('HMGET', ST, 'lastTick', 'behind', 'lastReadyAt', 'limit', 'maxTick', 'paused', 'awaitDraw', 'drawn')
local lastTick, behind, lastReadyAt = tonumber(st[1] or '0'), st[2], tonumber(st[3] or '0')
local limit, maxTick, paused = tonumber(st[4]), tonumber(st[5] or '0'), st[6] == '1'
local beforeDraw = st[7] == '1' and not st[8] -- as a tick would find it now: the draw may have come since
if lastTick == 0 or not limit or n - lastTick > 2 * tick + 1000 or behind ~= '0' then return {'later', ''} end
if paused or beforeDraw then return {'ok', ''} end
local cap = limit - redis.call('ZCARD', A)
if maxTick > 0 and only == '0' then
  -- The current tick began a tick before the next one is due; AD holds
  -- every admission (the ticks' and these) by Redis time.
  local since = tonumber(redis.call('HGET', ST, 'nextTick') or '0') - tick
  local used = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', AD, since, '+inf')) do
    local _, _, k = string.find(m, '^%d+:(%d+):')
    used = used + tonumber(k)
  end
  if cap > maxTick - used then cap = maxTick - used end
end
if cap <= 0 then return {'ok', ''} end
-- After ticks that caught up, their admissions' readyAt lie ahead of now:
-- the head of the line admitted now would be READY before them. The next
-- ticks admit it, in order. (A passthrough join is READY now: nobody waits.)
if only == '0' and lastReadyAt > n then return {'later', ''} end
local own, units, snapshot = nil, 0, ''
if stockAware then
  local share = shareOf(ARGV[9])
  own = ownStock()
  units = sellableOf(own, share)
  if not own.known then units = 0 end
  local grant, stale = useReservation(share)
  if stale then return {'later', snapshotOf(own)} end
  if cap > units then cap = units end
  if grant and cap > grant then cap = grant end
  if cap <= 0 then return {'ok', snapshotOf(own)} end
end
local seqs
if only ~= '0' then
  seqs = {}
  if redis.call('HGET', P .. 'e:' .. only, 'status') == 'waiting' then seqs = {only} end
else
  seqs = redis.call('ZRANGEBYSCORE', W, '-inf', entriesBound(epoch), 'LIMIT', 0, cap)
end
for _, s in ipairs(seqs) do admit(s, queue, epoch, n, ttl) end
if #seqs > 0 then
  redis.call('HINCRBY', ST, 'admittedTotal', #seqs)
  redis.call('ZADD', AD, n, n .. ':' .. #seqs .. ':' .. seqs[1])
end
if stockAware then
  own.admitted = own.admitted + #seqs
  redis.call('HSET', ST, 'sellable', units - #seqs)
  snapshot = snapshotOf(own)
end
local out = {'ok', snapshot}
for _, s in ipairs(seqs) do out[#out + 1] = s end
return out
