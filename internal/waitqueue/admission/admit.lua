-- admit.lua is one admission tick.
--
-- ARGV from 3 (tickArgs, scripts.go): queue, epoch, targetActive,
-- maxAdmitPerTick, tickMs, ttlMs, paused (0|1), offset (0..999: where in
-- its slice each readyAt falls), admissions head (the stream's last
-- admission of this queue, 0: none), admissions stream id, orders head,
-- orders stream id, stock-aware (0|1), scheduled (0|1: nobody is admitted
-- until the pre-queue is drawn), abandonMs (0: never), noJitter (0|1), the
-- stock ledger's share for this tick (JSON, see package ledger; empty: the
-- queue counts its own holdings alone).
--
-- Invariants, all within one atomic step, on Redis time:
--   - one tick per tickMs, however many admitters call: a call before the
--     scheduled tick returns 'early'; the schedule advances by tickMs (not
--     from the call), so N admitters admit at the configured rate, not N
--     times it; a call that comes late keeps the schedule — the ticks it
--     missed are due at once after it, up to half a second of them (older
--     ones, a queue whose admitters were all stopped, are forgiven rather
--     than admitted in a burst) — so a busy host, a slow call or a tick
--     refused as behind costs no admissions;
--   - tokens past expiresAt free their slot (status expired); a used token's
--     slot is held until its order's hold time, then freed;
--   - at most targetActive entries are in the active set;
--   - what the tick obeyed — targetActive (for an adaptive queue the
--     controller's limit), maxAdmitPerTick, whether admission is paused
--     (the queue's state, the payment breaker) and whether the queue is a
--     drop that admits nobody before its draw — is recorded in the stats
--     (limit, maxTick, paused, awaitDraw), in the same step, for the
--     admissions at once (admit_now.lua) to obey alike;
--   - nobody is admitted while the line has not applied every admission and
--     order event the streams hold (their heads): a Redis that lost
--     admissions or order claims would otherwise admit on top of slots it
--     no longer sees ('behind');
--   - only sequences up to the entries cursor are admitted (every join
--     before it is in line), in sequence order: admission is FIFO;
--   - an admitted entry leaves 'waiting' in the same step that puts it in
--     'active' and in the outbox;
--   - readyAt values are spread evenly across the tick (jitter), unless
--     noJitter (a passthrough queue: ready at the tick's time), and never
--     go back from one tick to the next (stats lastReadyAt): ticks that
--     catch up after a stall run back to back, and without it the next
--     one's spread would start before the last one's ended — a later place
--     READY before an earlier one;
--   - stock-aware: never more unordered shoppers admitted than units that
--     could still be sold — the stock the store reported (prefix..'stock',
--     or the ledger's later figure) minus the units held, by this line and
--     by every queue that shares its SKUs (the ledger's share): one per
--     admitted shopper who has not ordered, and the quantity of each
--     claimed order the store has not placed yet (a placed order's units
--     are out of the store's figure already) — and never more than the
--     ledger's grant (see package ledger). The line's stock state follows:
--     available (units left), held (none left but some held or pending,
--     here or in a queue sharing the SKUs: they may come back) or sold_out
--     (nothing left, held or pending); unknown while the store has
--     reported nothing (nobody is admitted then). What each slot holds is
--     read from HELD (see syncHeld), one call, not from every record in A;
--   - abandonment: a waiting shopper not present — no poll of their own,
--     no stream the notifier holds for them, no join — for abandonMs
--     (SEEN: the last time each was) leaves the line, reason 'abandoned',
--     before anyone is admitted, and goes to the leaves outbox (the
--     admitter records the leave on the entries stream, so a replay leaves
--     them out too); nobody is abandoned while a drop awaits its draw or
--     within abandonMs of it (the drawn were present at their join).
--
-- Returns {'early', msUntilDue} or {'ok', expired, admitted, active,
-- waiting, rate (per 1000 s), behind (0|1), msUntilNext, stock state,
-- sellable units, abandoned, the line's stock snapshot for the ledger
-- (JSON; empty when not stock-aware), 1 when this tick found the line no
-- longer stock-aware (its figures dropped: the ledger should forget it)}.
local queue, epoch = ARGV[3], ARGV[4]
local target, maxTick = tonumber(ARGV[5]), tonumber(ARGV[6])
local tick, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
local paused, offset = ARGV[9] == '1', tonumber(ARGV[10]) / 1000
local head, hid = tonumber(ARGV[11]), ARGV[12]
local ohead, oid = tonumber(ARGV[13]), ARGV[14]
local stockAware = ARGV[15] == '1'
local awaitDraw = ARGV[16] == '1'
local abandonMs = tonumber(ARGV[17])
local spread = 1
if ARGV[18] == '1' then spread = 0 end
local share = shareOf(ARGV[19])
local n = now()

local due = tonumber(redis.call('HGET', ST, 'nextTick') or '0')
if n < due then return {'early', due - n} end

local abandoned = 0
local drawnAt = redis.call('HGET', ST, 'drawnAt')
if abandonMs > 0 and not (awaitDraw and not drawnAt) and tonumber(drawnAt or '0') <= n - abandonMs then
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', SEEN, '-inf', '(' .. (n - abandonMs), 'LIMIT', 0, 1000)) do
    local e = P .. 'e:' .. s
    local f = redis.call('HMGET', e, 'status', 'user')
    if f[1] == 'waiting' or (f[1] == 'pre' and drawnAt) then
      redis.call('ZREM', W, s)
      if f[1] == 'pre' then redis.call('ZREM', P .. 'pre', s) end
      redis.call('HSET', e, 'status', 'left', 'reason', 'abandoned')
      finish(e, s, f[2])
      redis.call('ZADD', P .. 'leaves', s, s)
      abandoned = abandoned + 1
    end
    redis.call('ZREM', SEEN, s)
  end
end

local expired = redis.call('ZRANGEBYSCORE', A, '-inf', n)
for _, s in ipairs(expired) do
  local e = P .. 'e:' .. s
  local f = redis.call('HMGET', e, 'status', 'user')
  -- A used token stays used: its order's hold ran out, the slot is freed.
  if f[1] == 'admitted' then redis.call('HSET', e, 'status', 'expired') end
  finish(e, s, f[2])
  redis.call('ZREM', A, s)
  redis.call('HDEL', HELD, s)
end

local watermark = entriesBound(epoch) -- the highest entry id the follower has put in line
-- A scheduled drop admits nobody until its pre-queue is drawn: the
-- pre-queued get their places first, and nobody is admitted before the
-- opening — a join allowed past the line (an invite) neither: its place
-- sorts below any watermark, so the draw is waited for on its own.
local beforeDraw = awaitDraw and not redis.call('HGET', ST, 'drawn')
local behind = 0
if head > 0 and cursorAt('admissions', hid) < head then behind = 1 end
if ohead > 0 and cursorAt('orders', oid) < ohead then behind = 1 end

-- What could still be sold (see the stock invariant above). The tick
-- uses the ledger's reservation whether or not it admits (behind, paused,
-- no room): its snapshot then says so, and the ledger releases it.
local stockState, sellable, own, grant = '', 0, nil, nil
local skuList, figures = {}, {}
if stockAware then
  own = ownStock()
  local busy
  sellable, busy, skuList, figures = sellableOf(own, share)
  grant = useReservation(share)
  if not own.known then
    stockState, sellable = 'unknown', 0
  elseif sellable > 0 then stockState = 'available'
  elseif busy > 0 then stockState = 'held'
  else stockState = 'sold_out' end
end

local admitted = 0
if behind == 0 then
  local next = due + tick
  if due == 0 then next = n + tick
  elseif next < n - 500 then next = n - 500 end
  redis.call('HSET', ST, 'nextTick', next)
  due = next
  local cap = target - redis.call('ZCARD', A)
  if maxTick > 0 and cap > maxTick then cap = maxTick end
  if stockAware and cap > sellable then cap = sellable end
  if grant and cap > grant then cap = grant end
  if not paused and not beforeDraw and cap > 0 then
    local seqs = redis.call('ZRANGEBYSCORE', W, '-inf', watermark, 'LIMIT', 0, cap)
    local k = #seqs
    if k > 0 then
      local base = math.max(n, tonumber(redis.call('HGET', ST, 'lastReadyAt') or '0'))
      local last = base
      for i, s in ipairs(seqs) do
        last = base + spread * math.floor(((i - 1) + offset) * tick / k)
        admit(s, queue, epoch, last, ttl)
      end
      redis.call('HSET', ST, 'lastReadyAt', last)
    end
    admitted = k
    if k > 0 then
      redis.call('HINCRBY', ST, 'admittedTotal', k)
      redis.call('ZADD', AD, n, n .. ':' .. k .. ':' .. seqs[1])
      if stockAware then
        sellable = sellable - k
        own.admitted = own.admitted + k
        if sellable <= 0 then stockState = 'held' end
      end
    end
  end
end
redis.call('HSET', ST, 'lastTick', n, 'behind', behind, 'limit', target, 'maxTick', maxTick,
  'paused', paused and 1 or 0, 'awaitDraw', awaitDraw and 1 or 0)
local snapshot, unshared = '', 0
if stockAware then
  redis.call('HSET', ST, 'stock', stockState, 'sellable', sellable, 'skus', table.concat(skuList, ','),
    'skustock', table.concat(figures, ','), 'heldAdmitted', own.admitted)
  snapshot = snapshotOf(own)
elseif redis.call('HDEL', ST, 'stock', 'sellable', 'skus', 'skustock', 'heldAdmitted') > 0 then
  unshared = 1
end

-- The admission rate of the last minute, for ETAs: measured, not configured.
redis.call('ZREMRANGEBYSCORE', AD, '-inf', n - 60000)
local window = redis.call('ZRANGE', AD, 0, -1, 'WITHSCORES')
local sum, oldest = 0, n
for i = 1, #window, 2 do
  local _, _, count = string.find(window[i], '^%d+:(%d+):')
  sum = sum + tonumber(count)
  local at = tonumber(window[i + 1])
  if at < oldest then oldest = at end
end
local span = math.max(n - oldest + tick, tick) / 1000
redis.call('HSET', ST, 'rate', string.format('%.3f', sum / span))
return {'ok', #expired, admitted, redis.call('ZCARD', A), redis.call('ZCARD', W),
  math.floor(sum * 1000 / span + 0.5), behind, math.max(due - n, 0), stockState, sellable, abandoned,
  snapshot, unshared}
