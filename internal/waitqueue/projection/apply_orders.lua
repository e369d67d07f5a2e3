-- apply_orders.lua applies order events of USHER_ORDERS. ARGV after
-- apply.head.lua's (ordersArgs, scripts.go): the hold in ms (ARGV[6]), how
-- long a user's bought units are remembered in seconds (ARGV[7]), then
-- groups of ten: stream seq, kind (r: requested | f: final, not paid | p:
-- final, paid), entry seq, token id, order id, user, requestedAt ms, sku,
-- quantity, and when the stream stored the event (ms; 0: unknown) (entry
-- seq 0: nothing, an event that could not be read).
-- Invariant: a requested order holds its token — used by that order, slot
-- held until requestedAt + hold — whatever Redis remembers of the entry
-- (nothing, waiting, admitted, or expired by a tick that did not know of
-- the order, or expired or left by a replay that applied the admission or
-- a later leave first: see requested); a final order frees its slot. Both
-- are idempotent, so replaying them after a loss restores the slots
-- exactly, whichever stream is replayed first.
local hold, keep = tonumber(ARGV[6]), tonumber(ARGV[7])
local n = now()
for i = 8, #ARGV, 10 do
  local s = tonumber(ARGV[i])
  if s > at then
    local seq, tok, ord, user = ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
    local e = P .. 'e:' .. seq
    local f = redis.call('HMGET', e, 'status', 'tokenId', 'orderId', 'alias', 'expiresAt', 'leftAt')
    if seq == '0' then
      -- an event of another incarnation of the entries stream, or unreadable
    elseif ARGV[i+1] == 'r' then
      local ours = not f[2] or f[2] == tok
      if not f[4] and ours and requested(f[1], ARGV[i+9], f[5], f[6]) then
        if f[1] == 'waiting' then redis.call('ZREM', W, seq) end
        if f[1] == 'left' then redis.call('HDEL', e, 'reason') end
        local until_ = tonumber(ARGV[i+6]) + hold
        redis.call('HSET', e, 'status', 'used', 'orderId', ord, 'tokenId', tok, 'user', user, 'claimedAt', ARGV[i+6],
          'sku', ARGV[i+7], 'qty', ARGV[i+8])
        pointAt(user, seq)
        if until_ > n then
          redis.call('PERSIST', e)
          redis.call('ZADD', A, until_, seq)
        else
          redis.call('ZREM', A, seq)
          finish(e, seq, user)
        end
        syncHeld(seq)
      end
    else
      if f[1] == 'used' and f[3] == ord then
        redis.call('ZREM', A, seq)
        redis.call('HDEL', HELD, seq)
        finish(e, seq, user)
      end
      -- What the user bought, for the queue's maxPerUser: counted once,
      -- here or by the order worker before it showed the order PAID
      -- (boughtScript), whichever came first; the entry's 'counted' says.
      if ARGV[i+1] == 'p' and not (f[3] == ord and redis.call('HSETNX', e, 'counted', 1) == 0) then
        local bk = P .. 'b:' .. user
        redis.call('INCRBY', bk, tonumber(ARGV[i+8]))
        redis.call('EXPIRE', bk, keep)
      end
    end
    at = s
  end
end
