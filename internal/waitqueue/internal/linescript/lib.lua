-- lib.lua is the prologue every script that changes a line starts with: the
-- line's keys and the helpers that keep its records. Every helper keeps the
-- invariants of the whole line, whichever script calls it: an entry is in
-- at most one of the waiting line (W), the admitted set (A) and the
-- pre-queue; a record leaves W, A or the pre-queue in the step that changes
-- its status — but for a shopper's leave, whose record keeps its slot in A
-- until the leave is recorded (see leave.lua); HELD says what each member
-- of A holds; a finished record and its user's pointer become tombstones
-- that expire after the tombstone TTL.
--
-- KEYS: the line's six — waiting, active, outbox, stats, admits, cursor
-- (linescript.Keys). ARGV[1]: the queue's prefix, ARGV[2]: the
-- tombstone TTL in seconds; a script's own arguments follow from ARGV[3].
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
-- placeScore is where a join of kind ('' or 'a') at entry seq stands in
-- W: its place, or for one allowed past the line ahead of every place.
local function placeScore(seq, kind)
  local score = tonumber(seq)
  if kind == 'a' then score = score - 4503599627370496 end -- 2^52: ahead of every place
  return score
end
-- moveUp makes entry seq, a join read after the user's live entry cur
-- though the stream stored it first, the user's place, and cur an alias
-- of it: the gateway that published seq gave up on its answer (a broker
-- that stored it late, a gateway killed before it answered), the shopper
-- joined again elsewhere and that gateway put the later record in line
-- first. The stream's order says seq is the place — a replay puts it there
-- and `usherctl audit` judges by it — so the live line takes it too, while
-- cur still waits where its own record put it (FIFO by the record: the
-- shopper only moves forward). Their presence moves with them. Returns
-- seq, or nil when cur stands elsewhere than its own record puts it (a
-- drawn pre-queue, another kind): nothing moves then.
local function moveUp(seq, cur, user, kind, at)
  local score = redis.call('ZSCORE', W, cur)
  if not score or tonumber(score) ~= placeScore(cur, kind) then return nil end
  local n = now()
  if at == '0' then at = n end
  redis.call('ZREM', W, cur)
  redis.call('ZADD', W, 'NX', placeScore(seq, kind), seq)
  redis.call('HSET', P .. 'e:' .. seq, 'status', 'waiting', 'user', user, 'joined', at)
  -- a waiting record holds status, user and joined: it keeps its user
  local ce = P .. 'e:' .. cur
  redis.call('HDEL', ce, 'status', 'joined')
  redis.call('HSET', ce, 'alias', seq)
  redis.call('EXPIRE', ce, TTL)
  redis.call('SET', P .. 'u:' .. user, seq)
  local seen = redis.call('ZSCORE', SEEN, cur)
  redis.call('ZREM', SEEN, cur)
  redis.call('ZADD', SEEN, seen or n, seq)
  return seq
end
-- join puts a joined shopper in line once: a sequence seen before resolves
-- to its entry; a user whose entry is live keeps it and the new sequence
-- becomes an alias of it — unless the stream stored the new one first
-- (moveUp): a waiting shopper only ever moves forward, to the place their
-- earliest record gives them. ZADD NX never moves anyone else. prev is the
-- entry the gateway saw finished when it published the join ('0': none): a
-- replay that has not yet applied how prev ended must not alias the new
-- join to it. Returns the sequence of the live entry and, when it knows it
-- without another read, its status; or false when the record names another
-- user (the sequence belongs to another incarnation of the stream).
-- kind: '' (in line, FIFO), 'p' (the pre-queue, placed by the draw; once
-- drawn, a late one queues FIFO) or 'a' (allowed past the line: ahead of
-- everyone, FIFO among themselves). at: when the stream stored the join
-- (ms; '0': unknown, now), kept as the record's 'joined' for the time in
-- line the admitter measures.
-- buf (optional, see newGroup): a group's writes to the line, the users'
-- pointers and presence held back until flushGroup, so a group of joins
-- costs one command and one replicated write for each of the three, not
-- one per join; join reads the pointers it holds back before Redis's.
local function join(seq, user, prev, kind, at, buf)
  local e = P .. 'e:' .. seq
  local f = redis.call('HMGET', e, 'status', 'alias', 'user')
  if f[1] or f[2] then
    if f[3] and f[3] ~= user then return false end
    if f[2] then return f[2] end
    return seq, f[1]
  end
  local uk = P .. 'u:' .. user
  local cur = buf and buf.ptr[uk]
  local held = cur and buf.status[cur]
  if not cur then cur = redis.call('GET', uk) end
  if cur and cur ~= prev then
    local st = held or redis.call('HGET', P .. 'e:' .. cur, 'status')
    if st == 'waiting' and not held and kind ~= 'p' and tonumber(seq) < tonumber(cur) then
      local moved = moveUp(seq, cur, user, kind, at)
      if moved then return moved, 'waiting' end
    end
    if st == 'waiting' or st == 'admitted' or st == 'pre' then
      redis.call('HSET', e, 'alias', cur, 'user', user)
      redis.call('EXPIRE', e, TTL)
      -- joining again is being there (a held-back entry is present now)
      if not held then redis.call('ZADD', SEEN, 'XX', 'GT', now(), cur) end
      return cur, st
    end
  end
  local n = now()
  if at == '0' then at = n end
  local st = 'waiting'
  local score = placeScore(seq, kind)
  if kind == 'p' and not redis.call('HGET', ST, 'drawn') then
    st = 'pre'
    redis.call('HSET', e, 'status', 'pre', 'user', user, 'joined', at)
    redis.call('ZADD', P .. 'pre', 'NX', seq, seq)
    redis.call('HINCRBY', ST, 'preVersion', 1)
  else
    redis.call('HSET', e, 'status', 'waiting', 'user', user, 'joined', at)
  end
  if not buf then
    if st == 'waiting' then redis.call('ZADD', W, 'NX', score, seq) end
    redis.call('SET', uk, seq)
    redis.call('ZADD', SEEN, n, seq)
    return seq, st
  end
  if st == 'waiting' then
    buf.line[#buf.line + 1] = score
    buf.line[#buf.line + 1] = seq
  end
  buf.ptr[uk], buf.status[seq] = seq, st
  buf.seen[#buf.seen + 1] = n
  buf.seen[#buf.seen + 1] = seq
  return seq, st
end
-- newGroup is an empty buffer of held-back writes for join.
local function newGroup() return {line = {}, ptr = {}, status = {}, seen = {}} end
-- flushGroup makes buf's held-back writes: its entries in line (ZADD NX,
-- as join would), its users' pointers, its entries' presence.
local function flushGroup(buf)
  if #buf.line > 0 then redis.call('ZADD', W, 'NX', unpack(buf.line)) end
  local ptrs = {}
  for uk, seq in pairs(buf.ptr) do
    ptrs[#ptrs + 1] = uk
    ptrs[#ptrs + 1] = seq
  end
  if #ptrs > 0 then redis.call('MSET', unpack(ptrs)) end
  if #buf.seen > 0 then redis.call('ZADD', SEEN, unpack(buf.seen)) end
end
-- leave takes a waiting entry out of line, or frees an admitted one's slot,
-- in the step that marks it left (reason: '' when the shopper left,
-- 'abandoned' when the admitter found them gone) at at (ms: when the
-- stream stored the leave; nil or '0': now), kept as the record's leftAt
-- (see requested); an admitted entry left with hold keeps its slot until
-- leaveRecorded frees it. An unknown sequence gets a 'left' tombstone, so
-- its join, still on the way, is not put in line. Returns the status the
-- entry had.
local function leave(seq, user, reason, at, hold)
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
  elseif st == 'admitted' and hold then
    redis.call('HSET', HELD, seq, 'x') -- the slot, no stock (see syncHeld)
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
-- LEAVING holds the shoppers' leaves the line took that the entries stream
-- does not hold yet, each as leavingMember names it (keyspace: Leaving).
local LEAVING = P .. 'leaving'
local function leavingMember(seq, user) return seq .. ':' .. user end
-- leaveRecorded forgets a shopper's leave the entries stream has stored
-- (leave.lua keeps it in LEAVING until then) and frees the slot its record
-- kept. The first caller frees it; a repeat finds the leave gone and
-- changes nothing.
local function leaveRecorded(seq, user)
  if redis.call('ZREM', LEAVING, leavingMember(seq, user)) == 0 then return end
  local e = P .. 'e:' .. seq
  local alias = redis.call('HGET', e, 'alias')
  if alias then
    seq = alias
    e = P .. 'e:' .. seq
  end
  if redis.call('HGET', e, 'status') == 'left' then
    redis.call('ZREM', A, seq)
    redis.call('HDEL', HELD, seq)
  end
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
-- admission expired and no later than the leave. A request and a leave
-- stored in the same millisecond (by two streams' leaders, on two clocks)
-- cannot be ordered by their times; the request stands, since it exists
-- only because the claim script accepted it, which an applied leave
-- refuses. The claim script refuses an
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
  return st == 'expired' or (leftAt ~= nil and leftAt ~= false and stored <= tonumber(leftAt))
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
-- The entries stream's places (event.Place, event.PlaceBound): a join's
-- entry id is its message's stream sequence s while no usher.joins.v2
-- message of the queue came before it, and s * 1024 + its index in the
-- message after the first one (v2: that message's sequence, kept in the
-- cursor hash as 'entries.v2'; 0 while there is none). Ids are formatted
-- with %.0f: tostring would print one above 10^14 in exponent form.
local function placeOf(s, index, v2)
  if v2 == 0 or s < v2 then return string.format('%.0f', s) end
  return string.format('%.0f', s * 1024 + index)
end
-- placeBound is the highest entry id a follower that applied the entries
-- stream up to sequence at has put in line: entry ids are compared with
-- it, never with the cursor itself (a stream sequence).
local function placeBound(at, v2)
  if v2 == 0 or at < v2 then return at end
  return at * 1024 + 1023
end
-- entriesBound is placeBound of the entries cursor, 0 when the cursor
-- counts in another incarnation of the stream (or none).
local function entriesBound(id)
  local c = redis.call('HMGET', C, 'entries', 'entries.id', 'entries.v2')
  if c[2] ~= id then return 0 end
  return placeBound(tonumber(c[1] or '0'), tonumber(c[3] or '0'))
end
