package waitqueue

import "github.com/redis/go-redis/v9"

// Every key of one queue shares the hash tag {q}, so a queue lives in one
// Redis Cluster slot and each script below runs atomically on one node. The
// scripts derive per-entry keys (prefix .. 'e:' .. seq) inside the script;
// they hash to the same slot as the declared keys.
//
// An entry record (hash prefix..'e:'..seq) has status waiting | admitted |
// expired | used | left, or 'alias' naming the entry it duplicates. Records
// are never deleted while the entry is live, and a finished one is kept for a
// day as a tombstone so that a redelivered event cannot bring it back.

// ingestScript puts a joined shopper in line, once.
//
// KEYS: waiting, users. ARGV: prefix, seq, user, answer (1: return the
// place; 0: the admitter's batches, which need no answer).
// Invariant: a sequence is added at most once (its record is the tombstone)
// and ZADD NX never moves anyone; a user already in line keeps the place they
// have and the new sequence becomes an alias of it.
// Returns {status, seq of the live entry, rank or -1, waiting count}.
var ingestScript = redis.NewScript(`
local prefix, seq, user = ARGV[1], ARGV[2], ARGV[3]
local function answer(s)
  if ARGV[4] ~= '1' then return {} end
  local rank = redis.call('ZRANK', KEYS[1], s)
  local st = redis.call('HGET', prefix .. 'e:' .. s, 'status')
  return {st or 'unknown', s, rank or -1, redis.call('ZCARD', KEYS[1])}
end
local e = prefix .. 'e:' .. seq
local existing = redis.call('HMGET', e, 'status', 'alias')
if existing[2] then return answer(existing[2]) end
if existing[1] then return answer(seq) end
local cur = redis.call('HGET', KEYS[2], user)
if cur then
  local st = redis.call('HGET', prefix .. 'e:' .. cur, 'status')
  if st == 'waiting' or st == 'admitted' then
    redis.call('HSET', e, 'alias', cur, 'user', user)
    return answer(cur)
  end
end
redis.call('HSET', e, 'status', 'waiting', 'user', user)
redis.call('ZADD', KEYS[1], 'NX', seq, seq)
redis.call('HSET', KEYS[2], user, seq)
return answer(seq)
`)

// lookupScript finds the live entry of a user, if any.
//
// KEYS: users. ARGV: prefix, user. Returns {seq, status} or {}.
var lookupScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[2])
if not cur then return {} end
return {cur, redis.call('HGET', ARGV[1] .. 'e:' .. cur, 'status') or 'unknown'}
`)

// pollScript reads everything a poll answers in one round trip.
//
// KEYS: waiting, stats. ARGV: prefix, seq.
// Returns {status, seq, rank, waiting, readyAt, expiresAt, tokenId, user, rate}.
var pollScript = redis.NewScript(`
local prefix, seq = ARGV[1], ARGV[2]
local f = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'alias')
if f[2] then
  seq = f[2]
  f = redis.call('HMGET', prefix .. 'e:' .. seq, 'status')
end
local r = redis.call('HMGET', prefix .. 'e:' .. seq, 'readyAt', 'expiresAt', 'tokenId', 'user')
local rank = -1
if f[1] == 'waiting' then rank = redis.call('ZRANK', KEYS[1], seq) or -1 end
return {f[1] or 'unknown', seq, rank, redis.call('ZCARD', KEYS[1]),
  r[1] or '', r[2] or '', r[3] or '', r[4] or '', redis.call('HGET', KEYS[2], 'rate') or '0'}
`)

// leaveScript takes a shopper out of line or frees their slot.
//
// KEYS: waiting, active. ARGV: prefix, seq, user.
// Invariant: a waiting entry leaves the line and an admitted one frees its
// slot in the same step that marks it left; an unknown sequence gets a 'left'
// tombstone so its join event, if it is still on the way, is not ingested.
// The user's entry pointer stays: a later join sees a finished entry and
// starts a new one.
// Returns the status the entry had.
var leaveScript = redis.NewScript(`
local prefix, seq, user = ARGV[1], ARGV[2], ARGV[3]
local e = prefix .. 'e:' .. seq
local f = redis.call('HMGET', e, 'status', 'alias')
if f[2] then
  seq = f[2]
  e = prefix .. 'e:' .. seq
  f = redis.call('HMGET', e, 'status')
end
local st = f[1]
if st == 'waiting' then
  redis.call('ZREM', KEYS[1], seq)
elseif st == 'admitted' then
  redis.call('ZREM', KEYS[2], seq)
elseif st then
  return st
end
redis.call('HSET', e, 'status', 'left', 'user', user)
redis.call('EXPIRE', e, 86400)
return st or 'unknown'
`)

// admitScript is one admission tick.
//
// KEYS: waiting, active, outbox, stats, admits.
// ARGV: prefix, queue, nowMs, targetActive, maxAdmitPerTick, tickMs, ttlMs,
// watermark, paused (0|1), offset (0..999, where in its slice each readyAt falls).
//
// Invariants, all within one atomic step:
//   - tokens past expiresAt free their slot (status expired); a redeemed
//     token's slot is held until its order's hold time (see redeemScript)
//     and then freed without expiring the token;
//   - at most targetActive entries are ever in the active set, however many
//     admitters run this script at once;
//   - an admitted entry leaves 'waiting' in the same step that puts it in
//     'active' and in the outbox: there is no instant in which it is in neither;
//   - only sequences up to the watermark are admitted (every join before it
//     is already in line), in sequence order, so admission is FIFO;
//   - readyAt values are spread evenly across the tick (jitter), so a batch
//     does not reach the order path at one instant.
//
// Returns {expired, admitted, active, waiting, rate}, rate in admissions
// per 1000 s (Redis replies carry integers, not floats).
var admitScript = redis.NewScript(`
local prefix, queue = ARGV[1], ARGV[2]
local now, target, maxTick = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local tick, ttl, watermark = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local paused, offset = ARGV[9] == '1', tonumber(ARGV[10]) / 1000

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, s in ipairs(expired) do
  local e = prefix .. 'e:' .. s
  -- A redeemed token (status used) stays used: its order's hold ran out,
  -- the slot is freed, the token is not expired.
  if redis.call('HGET', e, 'status') ~= 'used' then
    redis.call('HSET', e, 'status', 'expired')
  end
  redis.call('EXPIRE', e, 86400)
  redis.call('ZREM', KEYS[2], s)
end

local admitted = 0
local cap = target - redis.call('ZCARD', KEYS[2])
if maxTick > 0 and cap > maxTick then cap = maxTick end
if not paused and cap > 0 then
  local seqs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', watermark, 'LIMIT', 0, cap)
  local n = #seqs
  for i, s in ipairs(seqs) do
    local readyAt = now + math.floor(((i - 1) + offset) * tick / n)
    local expiresAt = readyAt + ttl
    redis.call('HSET', prefix .. 'e:' .. s, 'status', 'admitted', 'readyAt', readyAt,
      'expiresAt', expiresAt, 'tokenId', queue .. ':' .. s)
    redis.call('ZADD', KEYS[2], expiresAt, s)
    redis.call('ZADD', KEYS[3], s, s)
    redis.call('ZREM', KEYS[1], s)
  end
  admitted = n
  if n > 0 then
    redis.call('HINCRBY', KEYS[4], 'admittedTotal', n)
    redis.call('ZADD', KEYS[5], now, now .. ':' .. n .. ':' .. seqs[1])
  end
end

-- The admission rate of the last minute, for ETAs: measured, not configured.
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - 60000)
local window = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
local sum, oldest = 0, now
for i = 1, #window, 2 do
  local _, _, count = string.find(window[i], '^%d+:(%d+):')
  sum = sum + tonumber(count)
  local at = tonumber(window[i + 1])
  if at < oldest then oldest = at end
end
local span = math.max(now - oldest + tick, tick) / 1000
redis.call('HSET', KEYS[4], 'rate', string.format('%.3f', sum / span))
return {#expired, admitted, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[1]), math.floor(sum * 1000 / span + 0.5)}
`)

// redeemScript turns an admitted entry's token into an order, once.
//
// KEYS: active. ARGV: prefix, seq, tokenId, orderId, holdUntilMs.
// Invariants: an admitted entry becomes 'used' by exactly one order id, in
// the same step that re-scores its slot to holdUntil (the order's deadline
// and then some), so the admission script does not expire a token whose
// order is in flight; the same order redeeming again is told 'redeemed'
// (idempotent), another order is told 'conflict'. Expired and left entries
// cannot be redeemed.
// Returns {outcome, orderId}: outcome is redeemed | conflict | expired |
// left | waiting | unknown.
var redeemScript = redis.NewScript(`
local prefix, seq, tokenId, orderId = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local e = prefix .. 'e:' .. seq
local f = redis.call('HMGET', e, 'status', 'tokenId', 'orderId')
if not f[1] or f[2] ~= tokenId then return {'unknown', ''} end
if f[1] == 'used' then
  if f[3] == orderId then return {'redeemed', orderId} end
  return {'conflict', f[3] or ''}
end
if f[1] ~= 'admitted' then return {f[1], ''} end
redis.call('HSET', e, 'status', 'used', 'orderId', orderId)
redis.call('ZADD', KEYS[1], 'XX', ARGV[5], seq)
return {'redeemed', orderId}
`)

// releaseScript frees the slot of a redeemed entry once its order is final.
//
// KEYS: active. ARGV: prefix, seq, orderId.
// Invariant: only the order that redeemed the entry frees its slot, and
// freeing twice is harmless. Returns 1 if a slot was freed.
var releaseScript = redis.NewScript(`
local e = ARGV[1] .. 'e:' .. ARGV[2]
if redis.call('HGET', e, 'orderId') ~= ARGV[3] then return 0 end
redis.call('EXPIRE', e, 86400)
return redis.call('ZREM', KEYS[1], ARGV[2])
`)
