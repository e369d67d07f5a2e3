-- claim.lua takes an order for an admitted entry's token at the moment
-- the order is requested (the gateway's intake), on Redis time.
-- ARGV from 3 (claimArgs, scripts.go): seq, tokenId, orderId, hold ms,
-- sku, quantity, user, maxPerUser (0: none).
-- Invariants: a token is used by exactly one order id; a user who bought
-- maxPerUser units of the queue cannot order more ('limit'); the claimed
-- sku and quantity are held against the stock until the store places the
-- order (see admit.lua); it is judged at the
-- request — not expired, past its readyAt (give or take the half second by
-- which a service's synced clock may lead Redis's) — so a backlog behind the request
-- can never turn an accepted order into an expired one; its slot is held
-- until claimedAt + hold (the order's deadline and margin), after which the
-- admission tick frees it if the order never finished. Claiming again with
-- the same order id is 'claimed' with the first claim's time.
-- Returns {outcome, claimedAt ms}: outcome is claimed | conflict | limit |
-- early | expired | waiting | left | unknown; a claim of several units of a
-- stock-aware line adds the line's stock snapshot (see below).
local seq, tok, ord, hold = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local sku, qty, user, maxPer = ARGV[7], tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
local n = now()
local e = P .. 'e:' .. seq
local f = redis.call('HMGET', e, 'status', 'tokenId', 'orderId', 'readyAt', 'expiresAt', 'claimedAt')
if not f[1] or f[2] ~= tok then return {'unknown', n} end
if f[1] == 'used' then
  if f[3] == ord then return {'claimed', tonumber(f[6] or n)} end
  return {'conflict', n}
end
if f[1] ~= 'admitted' then return {f[1], n} end
-- Early by less than the clocks' agreement (a service saw readyAt pass on
-- its Redis-synced clock a moment before Redis did) is not early.
if n + 500 < tonumber(f[4]) then return {'early', n} end
if n >= tonumber(f[5]) then return {'expired', n} end
if maxPer > 0 and tonumber(redis.call('GET', P .. 'b:' .. user) or '0') + qty > maxPer then
  return {'limit', n}
end
redis.call('HSET', e, 'status', 'used', 'orderId', ord, 'claimedAt', n, 'sku', sku, 'qty', qty)
redis.call('ZADD', A, 'XX', n + hold, seq)
syncHeld(seq)
-- A claim of several units holds more than its admission did: the queues
-- sharing its SKUs count them once the ledger has the line's snapshot, so
-- it goes there now (Claims.Claim), not with the next tick's report.
if qty > 1 and redis.call('HEXISTS', ST, 'stock') == 1 then return {'claimed', n, snapshotOf(ownStock())} end
return {'claimed', n}
