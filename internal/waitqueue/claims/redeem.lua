-- redeem.lua is the order worker's redemption of the token of its order.
-- ARGV from 3 (redeemArgs, scripts.go): seq, tokenId, orderId, holdUntil
-- ms, and of the request: when the stream stored it (ms; 0: unknown), when
-- the gateway claimed the token (requestedAt ms), sku, quantity.
-- Invariants: the token is used by exactly one order id (normally the
-- gateway's claim did it; after a Redis loss not yet healed, this does);
-- the slot is held at least until holdUntil (never shortened); an expired
-- or left entry is redeemed only by a request the stream stored before
-- the admission expired and before the leave — a replay after a loss that
-- applied the admission (expired by now) or a later leave ahead of the
-- request (see requested) — and gets its slot back while its hold lasts:
-- the order follower, applying the request, would do the same, and until
-- it has, the tick admits nobody on top (admit.lua: behind).
--
-- The hold rule: an accepted order holds its slot until it ends — released
-- by the worker once final — or until its hold runs out (the claim's
-- claimedAt + hold, extended here to holdUntil while it lasts), whichever
-- comes first; once the hold ran out the tick gives the slot to the next
-- shopper, and the order may never go through on it: a token used by this
-- order whose slot is gone is 'lapsed', and the worker ends the order
-- without a charge. So the slots of orders going through never exceed
-- targetActive, nor their units the sellable ones.
-- Returns {outcome, orderId, aseq}: outcome redeemed | lapsed | conflict
-- | expired | left | waiting | unknown; aseq where USHER_ADMISSIONS holds
-- the token's admission, as its follower recorded it (empty: not applied yet;
-- see apply_admissions.lua).
local seq, tok, ord, hold = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local stored, requestedAt, sku, qty = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local e = P .. 'e:' .. seq
local f = redis.call('HMGET', e, 'status', 'tokenId', 'orderId', 'expiresAt', 'leftAt', 'user', 'aseq')
local aseq = f[7] or ''
if not f[1] or f[2] ~= tok then return {'unknown', '', ''} end
if f[1] == 'used' then
  if f[3] ~= ord then return {'conflict', f[3] or '', ''} end
  if not redis.call('ZSCORE', A, seq) then return {'lapsed', ord, aseq} end
  redis.call('ZADD', A, 'XX', 'GT', hold, seq)
  return {'redeemed', ord, aseq}
end
if f[1] == 'admitted' then
  redis.call('HSET', e, 'status', 'used', 'orderId', ord, 'claimedAt', now())
  redis.call('ZADD', A, 'XX', 'GT', hold, seq)
  syncHeld(seq)
  return {'redeemed', ord, aseq}
end
if not requested(f[1], stored or '0', f[4], f[5]) then return {f[1], '', ''} end
-- A replayed request whose hold ran out meanwhile takes no slot back: the
-- tick may have given it away.
if tonumber(hold) <= now() then return {'lapsed', ord, aseq} end
local claimedAt = requestedAt
if tonumber(claimedAt) <= 0 then claimedAt = stored end
redis.call('HDEL', e, 'reason')
redis.call('HSET', e, 'status', 'used', 'orderId', ord, 'claimedAt', claimedAt, 'sku', sku, 'qty', qty)
redis.call('PERSIST', e)
if f[6] then pointAt(f[6], seq) end
redis.call('ZADD', A, 'GT', hold, seq)
syncHeld(seq)
return {'redeemed', ord, aseq}
