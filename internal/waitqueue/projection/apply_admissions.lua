-- apply_admissions.lua applies admission events of USHER_ADMISSIONS.
-- ARGV after apply.head.lua's (admissionsArgs, scripts.go): groups of six:
-- stream seq, entry seq, user, token id, readyAt ms, expiresAt ms. Entry
-- seq 0: nothing (an event that could not be read).
-- Invariant: an admission the stream holds is in the line: an entry Redis
-- lost (absent) or forgot it had admitted (waiting) becomes admitted with
-- the event's token, readyAt and expiresAt — the same token string — and
-- holds its slot until then; an entry that moved on meanwhile (used by an
-- order, left, expired: replayed from the other streams first) keeps its
-- status and gains the admission's record. In the normal case Redis itself
-- made the admission and the event changes nothing but this: the record of
-- the event's token keeps where the stream holds it ('aseq', the stream
-- sequence), so that the order worker can read the admission back from the
-- record before it charges an order for the token (Redis says where to
-- look; the stream says whether it is so).
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
