-- restore.lua recreates entry records that Redis lost.
--
-- KEYS: the line's six (linescript.Keys). ARGV (restoreArgs, scripts.go):
-- prefix, tombstoneTTL, unique ('1' when no user has two records in the
-- call, as most calls of a rebuild), then a group per record: nine for any
-- record — seq, status, user, alias, tokenId, readyAtMs, expiresAtMs,
-- orderId, score (a waiting entry's score in line; empty: its sequence) —
-- or three for an entry waiting in its FIFO place, most of a line: seq,
-- 'w', user. No two records of a call have one seq.
-- Invariants: a record that exists is never touched (the gateway and the
-- admitter may be writing the same queue while a rebuild runs, and what they
-- wrote is newer); sorted sets only grow with NX, so nobody moves; the user
-- pointer only moves forward to a later sequence, as the ingest script moves
-- it. Finished records are tombstones that expire like the live ones. A
-- pre-queued entry goes into the pre-queue set (counting its version up, as
-- the join script does), unless the queue was drawn meanwhile: then it
-- queues FIFO, as the join script puts a pre-queue join after the draw.
-- Returns, for each group, 1 if it was created and 0 if it was kept.
--
-- A record costs one HSET (and an EXPIRE if finished); the rest is one
-- command per call: the line, the pre-queue and the admitted set get one
-- ZADD each, the counters one HINCRBY. Whether the records exist is one
-- EXISTS of them all (a wiped queue holds none; only when it holds some is
-- each asked on its own), and the users' pointers one MSETNX (none of them
-- exists: each is set to the user's latest sequence of the call, with the
-- tombstone TTL if that entry is finished, which is what setting them one
-- by one in any order leaves; if any exists, they are set one by one).
-- Lua tables keyed by strings are this script's dearest work (BENCHMARKS.md,
-- "Why the defaults are what they are"): the caller's promises —
-- distinct seqs, and whether a user repeats — spare it two of them.
local prefix, ttl, unique = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local ekeys, at, ne = {}, {}, 0 -- each record's key, and where its group starts
local i = 4
while i <= #ARGV do
  ne = ne + 1
  ekeys[ne], at[ne] = prefix .. 'e:' .. ARGV[i], i
  if ARGV[i+1] == 'w' then i = i + 3 else i = i + 9 end
end
local fresh = ne == 0 or redis.call('EXISTS', unpack(ekeys)) == 0
local out, line, pre, held, heldIdx = {}, {}, {}, {}, {}
local nl = 0
-- User pointers to set, in record order: user, seq and finished (nil: not).
local pu, ps, pf, np = {}, {}, {}, 0
local admitted, drawn = 0, nil
for j = 1, ne do
  local i = at[j]
  local seq, st, user = ARGV[i], ARGV[i+1], ARGV[i+2]
  local alias, tok, ready, exp, ord, score = '', '', '', '', '', ''
  if st == 'w' then
    st = 'waiting'
  else
    alias, tok, ready, exp, ord, score = ARGV[i+3], ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7], ARGV[i+8]
  end
  local e = ekeys[j]
  if not fresh and redis.call('EXISTS', e) == 1 then
    out[j] = 0
  else
    out[j] = 1
    if alias ~= '' then
      redis.call('HSET', e, 'alias', alias, 'user', user)
    else
      if st == 'pre' then
        if drawn == nil then drawn = redis.call('HEXISTS', KEYS[4], 'drawn') == 1 end
        if drawn then st, score = 'waiting', '' end
      end
      if tok == '' and ord == '' then
        redis.call('HSET', e, 'status', st, 'user', user)
      else
        local h = {'status', st, 'user', user}
        if tok ~= '' then
          h[5], h[6], h[7], h[8], h[9], h[10] = 'tokenId', tok, 'readyAt', ready, 'expiresAt', exp
          admitted = admitted + 1
        end
        if ord ~= '' then h[#h+1], h[#h+2] = 'orderId', ord end
        redis.call('HSET', e, unpack(h))
      end
      local finished = false
      if st == 'waiting' then
        if score == '' then score = seq end
        line[nl+1], line[nl+2], nl = score, seq, nl + 2
      elseif st == 'pre' then
        pre[#pre+1], pre[#pre+2] = seq, seq
      elseif st == 'admitted' then
        held[#held+1], held[#held+2] = exp, seq
        heldIdx[#heldIdx+1], heldIdx[#heldIdx+2] = seq, 'a'
      else
        redis.call('EXPIRE', e, ttl)
        finished = true
      end
      if user ~= '' then
        np = np + 1
        pu[np], ps[np] = user, seq
        if finished then pf[np] = true end
      end
    end
  end
end
if np > 0 then
  -- Each user's latest entry of the call (its index), in the order first
  -- seen: every entry, when no user has two.
  local users = pu
  local latest = nil
  if not unique then
    latest, users = {}, {}
    for n = 1, np do
      local cur = latest[pu[n]]
      if cur == nil then
        users[#users+1] = pu[n]
        latest[pu[n]] = n
      elseif tonumber(ps[cur]) < tonumber(ps[n]) then
        latest[pu[n]] = n
      end
    end
  end
  local kv, nu = {}, #users
  for n = 1, nu do
    local u, m = users[n], n
    if latest then m = latest[u] end
    kv[2*n-1], kv[2*n] = prefix .. 'u:' .. u, ps[m]
  end
  if redis.call('MSETNX', unpack(kv)) == 1 then
    for n = 1, nu do
      local m = n
      if latest then m = latest[users[n]] end
      if pf[m] then redis.call('EXPIRE', kv[2*n-1], ttl) end
    end
  else
    for n = 1, np do
      local uk, seq = prefix .. 'u:' .. pu[n], ps[n]
      local moved = redis.call('SET', uk, seq, 'NX')
      if not moved then
        local cur = redis.call('GET', uk)
        if tonumber(cur) < tonumber(seq) then moved = redis.call('SET', uk, seq) end
      end
      if moved and pf[n] then redis.call('EXPIRE', uk, ttl) end
    end
  end
end
if nl > 0 then redis.call('ZADD', KEYS[1], 'NX', unpack(line)) end
if #pre > 0 then
  redis.call('ZADD', prefix .. 'pre', 'NX', unpack(pre))
  redis.call('HINCRBY', KEYS[4], 'preVersion', #pre / 2)
end
if #held > 0 then
  redis.call('ZADD', KEYS[2], 'NX', unpack(held))
  redis.call('HSET', prefix .. 'held', unpack(heldIdx)) -- what each holds, for the stock-aware tick (see syncHeld)
end
if admitted > 0 then redis.call('HINCRBY', KEYS[4], 'admittedTotal', admitted) end
return out
