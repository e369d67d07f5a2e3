package waitqueue

import (
	"github.com/redis/go-redis/v9"

	"usher/internal/ratelimit"
	"usher/internal/script"
)

// Every script below runs on one queue's keys, which share the hash tag {q}
// (see package keyspace), so each runs atomically on one Redis Cluster node.
// They derive per-entry and per-user keys from the queue's prefix; those
// hash to the same slot as the declared keys.
//
// Every mutating script gets the same six keys (stdKeys) and starts with the
// same two arguments: the queue's prefix and the tombstone TTL in seconds.
//
// An entry record (prefix..'e:'..seq) has status waiting | admitted | used |
// expired | left, or 'alias' naming the live entry a duplicate join resolved
// to. A live record (waiting, admitted, used while its order runs) has no
// TTL; a finished one becomes a tombstone that expires after the tombstone
// TTL, and so does the user's pointer (prefix..'u:'..user) when it names it.
//
// One clock: every time decision inside a script reads Redis TIME, never a
// caller's clock, so a host whose clock is off cannot admit early, expire a
// token early or free a slot early.
//
// The cursor hash (prefix..'cursor') says how far each stream is applied to
// the line: field <stream> holds the last stream sequence applied and
// <stream>.id the identity of the stream it counts in (a recreated stream
// starts again at 1). The scripts that apply stream events advance it in the
// same atomic step as the events' effects, so whatever Redis loses — its
// last second, a failover to a lagging replica, everything — it loses the
// cursor's advance with it, and the followers replay exactly the gap.

// luaLib is the prologue every mutating script starts with.
const luaLib = `
local P, TTL = ARGV[1], tonumber(ARGV[2])
local W, A, O, ST, AD, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local SEEN = P .. 'seen' -- when each waiting shopper was last present (see admitScript)
local HELD = P .. 'held' -- what each entry in A holds of the stock (see syncHeld)
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- finish makes a finished entry's record, and its user's pointer when it
-- names this entry, tombstones.
local function finish(e, seq, user)
  redis.call('EXPIRE', e, TTL)
  if user and user ~= '' then
    local uk = P .. 'u:' .. user
    if redis.call('GET', uk) == tostring(seq) then redis.call('EXPIRE', uk, TTL) end
  end
end
-- join puts a joined shopper in line once: a sequence seen before resolves
-- to its entry; a user whose entry is live keeps it and the new sequence
-- becomes an alias of it. ZADD NX never moves anyone. prev is the entry the
-- gateway saw finished when it published the join ('0': none): a replay
-- that has not yet applied how prev ended must not alias the new join to
-- it. Returns the sequence of the live entry and, when it knows it without
-- another read, its status; or false when the record names another user
-- (the sequence belongs to another incarnation of the stream).
-- kind: '' (in line, FIFO), 'p' (the pre-queue, placed by the draw; once
-- drawn, a late one queues FIFO) or 'a' (allowed past the line: ahead of
-- everyone, FIFO among themselves). at: when the stream stored the join
-- (ms; '0': unknown, now), kept as the record's 'joined' for the time in
-- line the admitter measures.
local function join(seq, user, prev, kind, at)
  local e = P .. 'e:' .. seq
  local f = redis.call('HMGET', e, 'status', 'alias', 'user')
  if f[1] or f[2] then
    if f[3] and f[3] ~= user then return false end
    if f[2] then return f[2] end
    return seq, f[1]
  end
  local uk = P .. 'u:' .. user
  local cur = redis.call('GET', uk)
  if cur and cur ~= prev then
    local st = redis.call('HGET', P .. 'e:' .. cur, 'status')
    if st == 'waiting' or st == 'admitted' or st == 'pre' then
      redis.call('HSET', e, 'alias', cur, 'user', user)
      redis.call('EXPIRE', e, TTL)
      redis.call('ZADD', SEEN, 'XX', 'GT', now(), cur) -- joining again is being there
      return cur, st
    end
  end
  local n = now()
  if at == '0' then at = n end
  local st = 'waiting'
  if kind == 'p' and not redis.call('HGET', ST, 'drawn') then
    st = 'pre'
    redis.call('HSET', e, 'status', 'pre', 'user', user, 'joined', at)
    redis.call('ZADD', P .. 'pre', 'NX', seq, seq)
    redis.call('HINCRBY', ST, 'preVersion', 1)
  else
    local score = tonumber(seq)
    if kind == 'a' then score = score - 4503599627370496 end -- 2^52: ahead of every place
    redis.call('HSET', e, 'status', 'waiting', 'user', user, 'joined', at)
    redis.call('ZADD', W, 'NX', score, seq)
  end
  redis.call('SET', uk, seq)
  redis.call('ZADD', SEEN, n, seq)
  return seq, st
end
-- leave takes a waiting entry out of line, or frees an admitted one's slot,
-- in the step that marks it left (reason: '' when the shopper left,
-- 'abandoned' when the admitter found them gone) at at (ms: when the
-- stream stored the leave; nil or '0': now), kept as the record's leftAt
-- (see requested). An unknown sequence gets a 'left' tombstone, so its
-- join, still on the way, is not put in line. Returns the status the
-- entry had.
local function leave(seq, user, reason, at)
  local e = P .. 'e:' .. seq
  local f = redis.call('HMGET', e, 'status', 'alias')
  if f[2] then
    seq = f[2]
    e = P .. 'e:' .. seq
    f = redis.call('HMGET', e, 'status')
  end
  local st = f[1]
  if st == 'waiting' then
    redis.call('ZREM', W, seq)
  elseif st == 'pre' then
    redis.call('ZREM', P .. 'pre', seq)
    redis.call('ZREM', W, seq) -- drawn, not settled yet (see drawScript)
    redis.call('HINCRBY', ST, 'preVersion', 1)
  elseif st == 'admitted' then
    redis.call('ZREM', A, seq)
    redis.call('HDEL', HELD, seq)
  elseif st then
    return st
  end
  if not at or at == '0' then at = now() end
  redis.call('HSET', e, 'status', 'left', 'user', user, 'leftAt', at)
  if reason and reason ~= '' then redis.call('HSET', e, 'reason', reason) end
  redis.call('ZREM', SEEN, seq)
  finish(e, seq, user)
  return st or 'unknown'
end
-- pointAt points the user at entry seq unless it points at a later one
-- (replays restore the pointer as the live scripts left it).
local function pointAt(user, seq)
  local uk = P .. 'u:' .. user
  local cur = redis.call('GET', uk)
  if not cur or tonumber(cur) <= tonumber(seq) then redis.call('SET', uk, seq) end
end
-- requested reports whether an order request the stream stored at stored
-- (ms, the stream's time; 0: unknown) takes entry record e as its order,
-- given the record's status st, expiresAt and leftAt: any record but one
-- used by an order already (or an alias), and one a replay finished —
-- expired, or left — when the stream stored the request before the
-- admission expired and before the leave. The claim script refuses an
-- expired or left entry, and a leave or an expiry finds a claimed entry
-- used and changes nothing, so such a record is a replay's that applied
-- the streams one at a time (the admission, or a later leave, before the
-- request): the request stands as the gateway accepted it. The stream's
-- time, not the request's own requestedAt, decides: no publisher can
-- write it, so a request published on the bus for a token that expired or
-- was given up unclaimed still orders nothing.
local function requested(st, stored, expiresAt, leftAt)
  if not st or st == 'waiting' or st == 'admitted' then return true end
  if st ~= 'expired' and st ~= 'left' then return false end
  stored = tonumber(stored)
  if stored <= 0 or (expiresAt and stored >= tonumber(expiresAt)) then return false end
  return st == 'expired' or (leftAt ~= nil and leftAt ~= false and stored < tonumber(leftAt))
end
-- setStock records a SKU's stock as the store reported it, unless a later
-- version is recorded already (reports race; versions order them).
local function setStock(sku, avail, ver)
  local k = P .. 'stock'
  local cur = tonumber(redis.call('HGET', k, sku .. ':v') or '0')
  if tonumber(ver) > cur then redis.call('HSET', k, sku, avail, sku .. ':v', ver) end
end
-- admit makes waiting entry seq of queue (its line counting in epoch)
-- admitted, READY at readyAt for ttl: its record with the token id, a slot
-- in the active set until it expires, the outbox, out of the line and of
-- presence. The caller counts the admissions.
local function admit(seq, queue, epoch, readyAt, ttl)
  local expiresAt = readyAt + ttl
  redis.call('HSET', P .. 'e:' .. seq, 'status', 'admitted', 'readyAt', readyAt,
    'expiresAt', expiresAt, 'tokenId', queue .. ':' .. epoch .. ':' .. seq)
  redis.call('ZADD', A, expiresAt, seq)
  redis.call('HSET', HELD, seq, 'a')
  redis.call('ZADD', O, seq, seq)
  redis.call('ZREM', W, seq)
  redis.call('ZREM', SEEN, seq)
end
-- syncHeld records in HELD what entry seq holds of the stock, as the
-- stock-aware tick counts it, from its record: 'a' (admitted: one unit of
-- any SKU), 'c:<qty>:<sku>' (claimed by an order the store has not placed
-- yet), 'p:<qty>:<sku>' (placed, not final: out of the store's figure
-- already) or 'x' (nothing: another status); no field once seq holds no
-- slot. Every script that puts an entry in A, takes it out or changes what
-- it holds keeps HELD so, in the same step; the tick reads HELD instead of
-- every record in A (O(1) calls, not O(active)), and rebuilds it from the
-- records when its size and A's differ.
local function syncHeld(seq)
  if not redis.call('ZSCORE', A, seq) then
    redis.call('HDEL', HELD, seq)
    return
  end
  local f = redis.call('HMGET', P .. 'e:' .. seq, 'status', 'placed', 'qty', 'sku')
  local v = 'x'
  if f[1] == 'admitted' then
    v = 'a'
  elseif f[1] == 'used' then
    v = 'c'
    if f[2] then v = 'p' end
    v = v .. ':' .. (f[3] or '1') .. ':' .. (f[4] or '')
  end
  redis.call('HSET', HELD, seq, v)
end
-- cursorAt returns how far stream field is applied, 0 when the cursor
-- counts in another incarnation of the stream (or none).
local function cursorAt(field, id)
  local c = redis.call('HMGET', C, field, field .. '.id')
  if c[2] ~= id then return 0, c[2] end
  return tonumber(c[1] or '0'), c[2]
end
`

// applyPrologue checks the follower's position: prev is the last stream
// sequence it applied (or where it started). If the cursor is behind it,
// Redis lost writes since: the follower must start again from the cursor.
// ARGV from 3: stream field, stream id, prev, event groups.
const applyPrologue = `
local field, sid, prev = ARGV[3], ARGV[4], tonumber(ARGV[5])
local at, had = cursorAt(field, sid)
if field == 'entries' and had and had ~= sid then return {'stale', 0, 0} end
if at < prev then return {'rewound', at, 0} end
local conflicts = 0
`

const applyEpilogue = `
redis.call('HSET', C, field, at, field .. '.id', sid)
return {'ok', at, conflicts}
`

// applyEntriesScript applies join and leave events of USHER_ENTRIES in
// stream order. Groups of six: stream seq, kind (j: join | p: join into
// the pre-queue | a: join allowed past the line | l: leave | x: nothing, an
// event that could not be read), entry seq, user, prev (the join's
// previous entry, see join) or a leave's reason, and when the stream
// stored the event (ms; 0: unknown).
// Invariant: an event at or below the cursor has been applied and is
// skipped; the cursor moves to the last event in the same step.
// Returns {'ok', cursor, conflicts} | {'rewound', cursor, 0} | {'stale', 0, 0}.
var applyEntriesScript = redis.NewScript(luaLib + applyPrologue + `
for i = 6, #ARGV, 6 do
  local s = tonumber(ARGV[i])
  if s > at then
    local kind = ARGV[i+1]
    if kind == 'j' or kind == 'p' or kind == 'a' then
      if kind == 'j' then kind = '' end
      if not join(ARGV[i+2], ARGV[i+3], ARGV[i+4], kind, ARGV[i+5]) then conflicts = conflicts + 1 end
    elseif kind == 'l' then
      leave(ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5])
    end
    at = s
  end
end
` + applyEpilogue)

// applyAdmissionsScript applies admission events of USHER_ADMISSIONS.
// Groups of six: stream seq, entry seq, user, token id, readyAt ms,
// expiresAt ms. Entry seq 0: nothing (an event that could not be read).
// Invariant: an admission the stream holds is in the line: an entry Redis
// lost (absent) or forgot it had admitted (waiting) becomes admitted with
// the event's token, readyAt and expiresAt — the same token string — and
// holds its slot until then; an entry that moved on meanwhile (used by an
// order, left, expired: replayed from the other streams first) keeps its
// status and gains the admission's record. In the normal case Redis itself
// made the admission and the event changes nothing but this: the record of
// the event's token keeps where the stream holds it ('aseq', the stream
// sequence), so that the order worker can read the admission back from the
// record before it charges an order for the token (Redis says where to
// look; the stream says whether it is so).
var applyAdmissionsScript = redis.NewScript(luaLib + applyPrologue + `
local n = now()
for i = 6, #ARGV, 6 do
  local s = tonumber(ARGV[i])
  if s > at then
    local seq, user, tok, exp = ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+5]
    local e = P .. 'e:' .. seq
    local f = redis.call('HMGET', e, 'status', 'alias', 'user', 'tokenId', 'readyAt')
    if seq == '0' or f[2] then
      -- an event of another incarnation of the entries stream, unreadable,
      -- or naming a duplicate join (never admitted itself)
    elseif f[3] and f[3] ~= user then
      conflicts = conflicts + 1
    elseif not f[5] and (not f[4] or f[4] == tok) then
      redis.call('HSET', e, 'user', user, 'tokenId', tok, 'readyAt', ARGV[i+4], 'expiresAt', exp)
      redis.call('HINCRBY', ST, 'admittedTotal', 1)
      pointAt(user, seq)
      redis.call('ZREM', SEEN, seq)
      if not f[1] or f[1] == 'waiting' or f[1] == 'pre' then
        if f[1] == 'waiting' then redis.call('ZREM', W, seq) end
        if f[1] == 'pre' then
          redis.call('ZREM', P .. 'pre', seq)
          redis.call('ZREM', W, seq) -- drawn, not settled yet (see drawScript)
          redis.call('HINCRBY', ST, 'preVersion', 1)
        end
        if tonumber(exp) <= n then
          redis.call('HSET', e, 'status', 'expired')
          finish(e, seq, user)
        else
          redis.call('HSET', e, 'status', 'admitted')
          redis.call('ZADD', A, exp, seq)
          redis.call('HSET', HELD, seq, 'a')
        end
      end
    end
    if seq ~= '0' and not f[2] and not (f[3] and f[3] ~= user) and (f[4] == tok or not f[4]) then
      redis.call('HSET', e, 'aseq', s)
    end
    at = s
  end
end
` + applyEpilogue)

// applyOrdersScript applies order events of USHER_ORDERS. Groups of ten:
// stream seq, kind (r: requested | f: final, not paid | p: final, paid),
// entry seq, token id, order id, user, requestedAt ms, sku, quantity, and
// when the stream stored the event (ms; 0: unknown) (entry seq 0:
// nothing, an event that could not be read). ARGV[6] (before the groups):
// the hold in ms; ARGV[7]: how long a user's bought units are remembered,
// in seconds.
// Invariant: a requested order holds its token — used by that order, slot
// held until requestedAt + hold — whatever Redis remembers of the entry
// (nothing, waiting, admitted, or expired by a tick that did not know of
// the order, or expired or left by a replay that applied the admission or
// a later leave first: see requested); a final order frees its slot. Both
// are idempotent, so replaying them after a loss restores the slots
// exactly, whichever stream is replayed first.
var applyOrdersScript = redis.NewScript(luaLib + applyPrologue + `
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
` + applyEpilogue)

// ingestScript is the gateway's own ingest of the join it just published,
// ahead of the admitter's follower, so the answer carries the exact place.
// It does not move the cursor: only the follower, applying the stream in
// order, knows everything before a sequence is in line.
// ARGV from 3: epoch (the entries stream's identity), seq, user, prev,
// kind (see join).
// Returns {status, seq of the live entry, rank or -1, waiting count, rate,
// stock state, SKUs with units left} (the line's figures a poll answers
// too, so a join's answer is the view a poll would give), or {'stale'}
// when the line belongs to another incarnation of the stream, or
// {'conflict'} when the sequence's record names another user.
// A batch of a queue's joins reads the line's identity, figures and
// undrawn pre-queue once (script.New's once): no join changes the first two,
// and one into the pre-queue forgets the third.
var ingestScript = script.New(luaLib + undrawnLua + `
local had = once('epoch ' .. C, function() return redis.call('HGET', C, 'entries.id') end)
if had and had ~= ARGV[3] then return {'stale'} end
local live, st = join(ARGV[4], ARGV[5], ARGV[6], ARGV[7], '0') -- just stored: now
if not live then return {'conflict'} end
if st == 'pre' then forget('undrawn ' .. ST) end
local rank = redis.call('ZRANK', W, live)
if not st then st = redis.call('HGET', P .. 'e:' .. live, 'status') end
if st == 'pre' and rank then st = 'waiting' end -- drawn, not settled yet (see drawScript)
local stats = once('stats ' .. ST, function() return redis.call('HMGET', ST, 'rate', 'stock', 'skus') end)
local waiting = redis.call('ZCARD', W)
if st ~= 'pre' then
  rank, waiting = undrawnAhead(W, live, rank or -1, waiting, once('undrawn ' .. ST, function() return undrawn(ST, P) end))
end
return {st or 'unknown', live, rank or -1, waiting, stats[1] or '0', stats[2] or '', stats[3] or ''}
`)

// lookupLua finds the current entry of a user, if any, and how many units
// the user bought in the queue: lookup(pointer key, bought key, prefix)
// returns {seq or the empty string, status or the empty string, bought}.
const lookupLua = `
local function lookup(uk, bk, prefix)
  local bought = tonumber(redis.call('GET', bk) or '0')
  local cur = redis.call('GET', uk)
  if not cur then return {'', '', bought} end
  return {cur, redis.call('HGET', prefix .. 'e:' .. cur, 'status') or 'unknown', bought}
end
`

// lookupScript is lookup alone.
// KEYS: the user's pointer, the user's bought count. ARGV: prefix.
var lookupScript = script.New(lookupLua + `return lookup(KEYS[1], KEYS[2], ARGV[1])`)

// lookupLimitedScript decides a join's rate limits (ratelimit.Lua) and
// looks its user up in one step: a join's one round trip before its
// publish, where two were.
// KEYS: the user's pointer, the user's bought count, then the limits' keys.
// ARGV: prefix, then the limits' arguments (ratelimit.Plan).
// Returns lookup's three fields, then gcra's.
var lookupLimitedScript = script.New(ratelimit.Lua + lookupLua + `
local lk = {}
for i = 3, #KEYS do lk[i - 2] = KEYS[i] end
local la = {}
for i = 2, #ARGV do la[i - 1] = ARGV[i] end
local out = lookup(KEYS[1], KEYS[2], ARGV[1])
for _, v in ipairs(gcra(lk, la)) do out[#out + 1] = v end
return out
`)

// undrawnLua counts a scheduled drop's pre-queue in the line before the
// draw: the draw puts it ahead of every join made since the opening (scores
// from 1, their sequences) and behind those allowed past the line (negative
// scores; see drawScript), so such a join is told the place it will have,
// not "1 of 1" and, at the draw, one as far back as the pre-queue is long.
// It is the one rule for the line's length and a place in it, whoever
// reads them — a poll, a join's answer, the notifier's ranks (ranksScript):
// the length counts the pre-queue still to be drawn for every entry told
// one but a pre-queued entry itself (an admitted shopper heads that line, a
// join not applied yet is at its back), and a place counts it when it lies
// ahead. Once drawn, or with no pre-queue, nothing changes.
// undrawn(ST, prefix) is the pre-queue still to be drawn;
// undrawnAhead(W, seq, rank, waiting, pre) returns rank (-1: not in line)
// and waiting with it counted in.
const undrawnLua = `
local function undrawn(st, prefix)
  if redis.call('HEXISTS', st, 'drawn') == 1 then return 0 end
  return redis.call('ZCARD', prefix .. 'pre')
end
local function undrawnAhead(w, seq, rank, waiting, pre)
  if pre == 0 then return rank, waiting end
  if rank >= 0 and tonumber(redis.call('ZSCORE', w, seq)) > 0 then rank = rank + pre end
  return rank, waiting + pre
end
`

// pollScript reads everything a poll answers in one round trip and, when
// asked (a shopper's own poll), records that a waiting shopper is present
// (see admitScript: abandonment).
// KEYS: stdKeys. ARGV: prefix, seq, present (0|1).
// A sequence without a record is 'unknown' while the entries cursor has
// not reached it (joined, not applied yet) and 'gone' after (its tombstone
// expired).
// Returns {status, seq, rank, waiting, readyAt, expiresAt, tokenId, user,
// rate, stock state, SKUs with units left, reason}.
var pollScript = script.New(undrawnLua + `
local prefix, seq = ARGV[1], ARGV[2]
local r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'readyAt', 'expiresAt', 'tokenId', 'user', 'reason', 'alias')
if r[7] then
  seq = r[7]
  r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'readyAt', 'expiresAt', 'tokenId', 'user', 'reason')
end
local st = r[1]
if not st then
  local c = redis.call('HGET', KEYS[6], 'entries')
  st = 'unknown'
  if c and tonumber(seq) <= tonumber(c) then st = 'gone' end
end
if ARGV[3] == '1' and (st == 'waiting' or st == 'pre') then
  local t = once('time', function() return redis.call('TIME') end)
  redis.call('ZADD', prefix .. 'seen', 'XX', 'GT', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), seq)
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
`)

// leaveScript is the gateway's leave (the follower applies the leave event
// too; both are idempotent). ARGV from 3: seq, user.
var leaveScript = redis.NewScript(luaLib + `return leave(ARGV[3], ARGV[4])`)

// admitScript is one admission tick.
//
// ARGV from 3: queue, epoch, targetActive, maxAdmitPerTick, tickMs, ttlMs,
// paused (0|1), offset (0..999: where in its slice each readyAt falls),
// admissions head (the stream's last admission of this queue, 0: none),
// admissions stream id, orders head, orders stream id, stock-aware (0|1),
// scheduled (0|1: nobody is admitted until the pre-queue is drawn),
// abandonMs (0: never), noJitter (0|1), the stock ledger's share for this
// tick (JSON, see stockshare.go; empty: the queue counts its own holdings
// alone).
//
// Invariants, all within one atomic step, on Redis time:
//   - one tick per tickMs, however many admitters call: a call before the
//     scheduled tick returns 'early'; the schedule advances by tickMs (not
//     from the call), so N admitters admit at the configured rate, not N
//     times it; a call that comes late keeps the schedule — the ticks it
//     missed are due at once after it, up to half a second of them (older
//     ones, a queue whose admitters were all stopped, are forgiven rather
//     than admitted in a burst) — so a busy host, a slow call or a tick
//     refused as behind costs no admissions;
//   - tokens past expiresAt free their slot (status expired); a used token's
//     slot is held until its order's hold time, then freed;
//   - at most targetActive entries are in the active set;
//   - what the tick obeyed — targetActive (for an adaptive queue the
//     controller's limit), maxAdmitPerTick, whether admission is paused
//     (the queue's state, the payment breaker) and whether the queue is a
//     drop that admits nobody before its draw — is recorded in the stats
//     (limit, maxTick, paused, awaitDraw), in the same step, for the
//     admissions at once (admitNowScript) to obey alike;
//   - nobody is admitted while the line has not applied every admission and
//     order event the streams hold (their heads): a Redis that lost
//     admissions or order claims would otherwise admit on top of slots it
//     no longer sees ('behind');
//   - only sequences up to the entries cursor are admitted (every join
//     before it is in line), in sequence order: admission is FIFO;
//   - an admitted entry leaves 'waiting' in the same step that puts it in
//     'active' and in the outbox;
//   - readyAt values are spread evenly across the tick (jitter), unless
//     noJitter (a passthrough queue: ready at the tick's time), and never
//     go back from one tick to the next (stats lastReadyAt): ticks that
//     catch up after a stall run back to back, and the next one's spread
//     started before the last one's ended — a later place was READY before
//     an earlier one (usherctl audit's lottery-order check caught it);
//   - stock-aware: never more unordered shoppers admitted than units that
//     could still be sold — the stock the store reported (prefix..'stock',
//     or the ledger's later figure) minus the units held, by this line and
//     by every queue that shares its SKUs (the ledger's share): one per
//     admitted shopper who has not ordered, and the quantity of each
//     claimed order the store has not placed yet (a placed order's units
//     are out of the store's figure already) — and never more than the
//     ledger's grant (see stockshare.go). The line's stock state follows:
//     available (units left), held (none left but some held or pending,
//     here or in a queue sharing the SKUs: they may come back) or sold_out
//     (nothing left, held or pending); unknown while the store has
//     reported nothing (nobody is admitted then). What each slot holds is
//     read from HELD (see syncHeld), one call, not from every record in A;
//   - abandonment: a waiting shopper not present — no poll of their own,
//     no stream the notifier holds for them, no join — for abandonMs
//     (SEEN: the last time each was) leaves the line, reason 'abandoned',
//     before anyone is admitted, and goes to the leaves outbox (the
//     admitter records the leave on the entries stream, so a replay leaves
//     them out too); nobody is abandoned while a drop awaits its draw or
//     within abandonMs of it (the drawn were present at their join).
//
// Returns {'early', msUntilDue} or {'ok', expired, admitted, active,
// waiting, rate (per 1000 s), behind (0|1), msUntilNext, stock state,
// sellable units, abandoned, the line's stock snapshot for the ledger
// (JSON; empty when not stock-aware), 1 when this tick found the line no
// longer stock-aware (its figures dropped: the ledger should forget it)}.
var admitScript = redis.NewScript(luaLib + stockLua + `
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

local watermark = cursorAt('entries', epoch)
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
`)

// claimScript takes an order for an admitted entry's token at the moment
// the order is requested (the gateway's intake), on Redis time.
// ARGV from 3: seq, tokenId, orderId, hold ms, sku, quantity, user,
// maxPerUser (0: none).
// Invariants: a token is used by exactly one order id; a user who bought
// maxPerUser units of the queue cannot order more ('limit'); the claimed
// sku and quantity are held against the stock until the store places the
// order (see admitScript); it is judged at the
// request — not expired, past its readyAt (give or take the half second by
// which a service's synced clock may lead Redis's) — so a backlog behind the request
// can never turn an accepted order into an expired one; its slot is held
// until claimedAt + hold (the order's deadline and margin), after which the
// admission tick frees it if the order never finished. Claiming again with
// the same order id is 'claimed' with the first claim's time.
// Returns {outcome, claimedAt ms}: outcome is claimed | conflict | limit |
// early | expired | waiting | left | unknown; a claim of several units of a
// stock-aware line adds the line's stock snapshot (see below).
var claimScript = redis.NewScript(luaLib + stockLua + `
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
-- it goes there now (Store.Claim), not with the next tick's report.
if qty > 1 and redis.call('HEXISTS', ST, 'stock') == 1 then return {'claimed', n, snapshotOf(ownStock())} end
return {'claimed', n}
`)

// redeemScript is the order worker's redemption of the token of its order.
// ARGV from 3: seq, tokenId, orderId, holdUntil ms, and of the request:
// when the stream stored it (ms; 0: unknown), when the gateway claimed the
// token (requestedAt ms), sku, quantity.
// Invariants: the token is used by exactly one order id (normally the
// gateway's claim did it; after a Redis loss not yet healed, this does);
// the slot is held at least until holdUntil (never shortened); an expired
// or left entry is redeemed only by a request the stream stored before
// the admission expired and before the leave — a replay after a loss that
// applied the admission (expired by now) or a later leave ahead of the
// request (see requested) — and gets its slot back while its hold lasts:
// the order follower, applying the request, would do the same, and until
// it has, the tick admits nobody on top (admitScript: behind).
//
// The hold rule: an accepted order holds its slot until it ends — released
// by the worker once final — or until its hold runs out (the claim's
// claimedAt + hold, extended here to holdUntil while it lasts), whichever
// comes first; once the hold ran out the tick gives the slot to the next
// shopper, and the order may never go through on it: a token used by this
// order whose slot is gone is 'lapsed', and the worker ends the order
// without a charge. So the slots of orders going through never exceed
// targetActive, nor their units the sellable ones.
// Returns {outcome, orderId, aseq}: outcome redeemed | lapsed | conflict
// | expired | left | waiting | unknown; aseq where USHER_ADMISSIONS holds
// the token's admission, as its follower recorded it (empty: not applied yet;
// see applyAdmissionsScript).
var redeemScript = script.New(luaLib + `
local seq, tok, ord, hold = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
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
if not requested(f[1], ARGV[7] or '0', f[4], f[5]) then return {f[1], '', ''} end
-- A replayed request whose hold ran out meanwhile takes no slot back: the
-- tick may have given it away.
if tonumber(hold) <= now() then return {'lapsed', ord, aseq} end
local claimedAt = ARGV[8]
if tonumber(claimedAt) <= 0 then claimedAt = ARGV[7] end
redis.call('HDEL', e, 'reason')
redis.call('HSET', e, 'status', 'used', 'orderId', ord, 'claimedAt', claimedAt, 'sku', ARGV[9], 'qty', ARGV[10])
redis.call('PERSIST', e)
if f[6] then pointAt(f[6], seq) end
redis.call('ZADD', A, 'GT', hold, seq)
syncHeld(seq)
return {'redeemed', ord, aseq}
`)

// releaseScript frees the slot of a used entry once its order is final.
// ARGV from 3: seq, orderId.
// Invariant: only the order that used the entry frees its slot, and
// freeing twice is harmless. Returns 1 if a slot was freed.
var releaseScript = script.New(luaLib + `
local e = P .. 'e:' .. ARGV[3]
local f = redis.call('HMGET', e, 'orderId', 'user')
if f[1] ~= ARGV[4] then return 0 end
finish(e, ARGV[3], f[2])
redis.call('HDEL', HELD, ARGV[3])
return redis.call('ZREM', A, ARGV[3])
`)

// boughtScript counts the units of entry seq's PAID order against its
// user's maxPerUser, once: the order worker calls it before the order shows
// PAID, so that a shopper who sees PAID and joins again is refused, and the
// orders follower, applying the completed event later, counts it only if
// this did not (the entry's 'counted'). An entry that is not the order's
// (gone, or another order's) counts nothing here: the follower does. A
// follower that applies the event only after the entry's tombstone expired
// (TombstoneTTL behind) would count it a second time: the limit errs
// towards refusing, and the store's own per-user check stays exact.
// ARGV from 3: seq, orderId, user, quantity, seconds the count is kept.
// Returns 1 if it counted.
var boughtScript = script.New(luaLib + `
local e = P .. 'e:' .. ARGV[3]
if redis.call('HGET', e, 'orderId') ~= ARGV[4] or redis.call('HSETNX', e, 'counted', 1) == 0 then return 0 end
local bk = P .. 'b:' .. ARGV[5]
redis.call('INCRBY', bk, tonumber(ARGV[6]))
redis.call('EXPIRE', bk, tonumber(ARGV[7]))
return 1
`)

// placedScript records that the store placed the order of entry seq (its
// units are out of the store's stock figure now, no longer held by the
// line) together with the stock the store reported, in one step.
// ARGV from 3: seq, orderId, sku, available, version.
var placedScript = script.New(luaLib + `
local e = P .. 'e:' .. ARGV[3]
if redis.call('HGET', e, 'orderId') == ARGV[4] then
  redis.call('HSET', e, 'placed', 1)
  syncHeld(ARGV[3])
end
setStock(ARGV[5], ARGV[6], ARGV[7])
return 1
`)

// stockScript records the stock of SKUs as the store reported them (see
// setStock). ARGV from 3: only (1: these are all the queue's SKUs; others
// recorded are dropped), then groups of three: sku, available, version.
var stockScript = redis.NewScript(luaLib + `
local k = P .. 'stock'
local keepSkus = {}
for i = 4, #ARGV, 3 do
  setStock(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  keepSkus[ARGV[i]] = true
end
if ARGV[3] == '1' then
  local rows = redis.call('HKEYS', k)
  for _, f in ipairs(rows) do
    local sku = f
    if string.sub(f, -2) == ':v' then sku = string.sub(f, 1, -3) end
    if not keepSkus[sku] then redis.call('HDEL', k, f) end
  end
end
return 1
`)

// drawScript makes the lottery's order the line, in one step: a crash
// leaves either no draw or all of it. The order was staged before, outside
// it (prefix..'draw': the pre-queued sequences, scored by place / (n + 1),
// written in batches by Store.Draw), so Redis is busy only for the
// checks below, each O(1) or O(log n), and the few joins made since the
// opening: the staged set becomes the line by RENAME.
// ARGV from 3: epoch (the entries stream's identity), the order's digest
// (kept for the reveal), n (how many were staged), the pre-queue's version
// when it was read (every change of the pre-queue counts it up), upTo (0:
// the entries cursor; else the cursor of the draw being redone after Redis
// lost it — see Store.Redraw — whose later pre-queue joins queue FIFO, as
// they did the first time).
// Invariants: the draw happens once; it places exactly the pre-queue of
// the entries cursor — every pre-queue join the follower applied, nothing
// the gateway put in ahead of it — so that anyone can recompute it from
// the stream up to that cursor: a staged order that is not exactly the
// pre-queue (someone joined or left since it was read) is refused and
// staged again. The drawn get places 1..n, ahead of every join made after
// the opening (scores below 1, where a FIFO place's score is its
// sequence) and behind those allowed past the line (negative scores).
// The drawn records keep status 'pre' until settleDrawScript passes; every
// script reads a 'pre' record with a place in line as waiting.
// Returns n, -1 when the queue was drawn already, -2 when the staged order
// is not the pre-queue of the cursor.
var drawScript = redis.NewScript(luaLib + `
if redis.call('HGET', ST, 'drawn') then return -1 end
local pre, stage, n = P .. 'pre', P .. 'draw', tonumber(ARGV[5])
local cursor = cursorAt('entries', ARGV[3])
local upTo = tonumber(ARGV[7])
if (redis.call('HGET', ST, 'preVersion') or '0') ~= ARGV[6] then return -2 end
if upTo == 0 then
  upTo = cursor
  if #redis.call('ZRANGEBYSCORE', pre, '(' .. cursor, '+inf', 'LIMIT', 0, 1) > 0 then return -2 end
elseif cursor < upTo then
  return -2
end
if redis.call('ZCOUNT', pre, '-inf', upTo) ~= n or redis.call('ZCARD', stage) ~= n then return -2 end
if n > 0 then
  local w = redis.call('ZRANGE', W, 0, -1, 'WITHSCORES')
  for i = 1, #w, 2 do redis.call('ZADD', stage, w[i + 1], w[i]) end
  redis.call('RENAME', stage, W)
end
for _, seq in ipairs(redis.call('ZRANGEBYSCORE', pre, '(' .. upTo, '+inf')) do
  redis.call('HSET', P .. 'e:' .. seq, 'status', 'waiting')
  redis.call('ZADD', W, tonumber(seq), seq)
  redis.call('ZREM', pre, seq)
end
redis.call('HSET', ST, 'drawn', n, 'drawCursor', upTo, 'drawDigest', ARGV[4], 'drawnAt', now())
return n
`)

// settleDrawScript turns up to ARGV[3] drawn records from 'pre' into
// 'waiting' and takes them out of the pre-queue set, after the draw; the
// admitter calls it until nothing is left, a batch at a time so that Redis
// is never busy for long. Returns how many are left.
var settleDrawScript = redis.NewScript(luaLib + `
if not redis.call('HGET', ST, 'drawn') then return 0 end
local pre = P .. 'pre'
for _, seq in ipairs(redis.call('ZRANGE', pre, 0, tonumber(ARGV[3]) - 1)) do
  local e = P .. 'e:' .. seq
  if redis.call('HGET', e, 'status') == 'pre' then
    redis.call('HSET', e, 'status', 'waiting')
    -- One the draw did not place (put back in the pre-queue by a replay
    -- racing a rebuild that restored the draw) queues FIFO, never nowhere.
    redis.call('ZADD', W, 'NX', tonumber(seq), seq)
  end
  redis.call('ZREM', pre, seq)
end
return redis.call('ZCARD', pre)
`)

// admitNowScript admits the head of the line at once, outside the ticks: a
// join into an empty line with a slot free (no crowd, no wait), or every
// join of a passthrough queue.
// ARGV from 3: queue, epoch, ttlMs, tickMs, stock-aware (0|1), only (a
// sequence: admit that entry alone if it waits — a passthrough join, where
// nobody waits and order does not matter; 0: the head of the line), the
// stock ledger's share for this step (JSON, see stockshare.go; empty: the
// queue counts its own holdings alone).
// Invariants: those of admitScript, by what the last tick recorded that it
// obeys (admitScript's limit, maxTick, paused and awaitDraw: one source,
// whoever admits) — FIFO up to the entries cursor; never over the tick's
// limit (for an adaptive queue the controller's, not the configured
// targetActive); nobody while the tick found admission paused (the
// queue's state, the payment breaker), nor before a drop's draw (the draw
// as it stands now: the one that just happened counts); never over the
// sellable units, counted here and now as a tick counts them (a claim made
// since the last tick holds its units; see stockLua) and within the
// ledger's grant; never more than maxTick in a tick (the head of the line
// only; counting what the current tick and earlier calls in it admitted:
// the join that found the line empty may find it full by now — the
// follower applied joins from other gateways meanwhile, or replayed a
// whole line Redis had lost — and the head of that line is the ticks' to
// admit at the configured rate), in one atomic step with the outbox — and
// nothing while the last tick found the line behind the streams or is
// older than two ticks and a second (the guards only a tick runs), nor the
// head of the line while the ticks' last readyAt lies ahead (after
// catch-up ticks: it would be READY before those admitted ahead of it).
// What it admits is READY at once: readyAt is Redis's time of the call.
// Returns {'ok', snapshot, seq...} — the sequences admitted — or {'later',
// snapshot} when a guard refused (the next tick may lift it, or a fresh
// reservation: the caller may try again then). snapshot: the line's stock
// snapshot for the ledger (JSON), empty when this step counted no stock.
var admitNowScript = redis.NewScript(luaLib + stockLua + `
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
  seqs = redis.call('ZRANGEBYSCORE', W, '-inf', cursorAt('entries', epoch), 'LIMIT', 0, cap)
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
`)
