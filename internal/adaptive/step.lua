-- step.lua is one admission tick's look at the adaptive limit.
--
-- KEYS: limit, waiting, active. ARGV: prefix, window ms, fingerprint (the
-- configuration the controller started from), start limit, state TTL in
-- seconds, claim lease in ms.
-- Returns {'start', w, limit, reason, evLimit} when the state was (re)made
-- now; {'hold', w, limit, reason, evLimit} when no decision is due (this
-- window is decided, or another caller holds its claim); {'due', w, limit,
-- reason, evLimit, state, last window, waiting, active} when this caller
-- claimed window w: it decides with the state and window w-1's figures,
-- and commits. The window the controller (re)started in is never judged:
-- a start counts the next window as decided, so the first claim comes the
-- window after it, on its figures. Only the orders that began and ended
-- within the start window finish in it — the short ones — and a baseline
-- taken from them would hold the limit below the order path's knee.
-- Invariant: at most one live claim per window, and a window once decided
-- is never claimed again — N admitters, one decision per window.
local L = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local w = math.floor(now / tonumber(ARGV[2]))
local f = redis.call('HMGET', L, 'fp', 'applied', 'reason', 'window', 'claim', 'claimUntil', 'evLimit')
if f[1] ~= ARGV[3] then
  redis.call('HSET', L, 'fp', ARGV[3], 'limit', ARGV[4], 'applied', ARGV[4], 'reason', 'start', 'window', w + 1,
    'claim', 0, 'claimUntil', 0, 'baseline', 0, 'latency', 0, 'mean', 0, 'lastCut', 0, 'resume', 0,
    'sinceDrain', 0, 'drained', 0, 'holdBaseline', 0, 'evLimit', ARGV[4], 'at', now, 'orders', 0)
  redis.call('EXPIRE', L, ARGV[5])
  return {'start', w, ARGV[4], 'start', ARGV[4]}
end
if tonumber(f[4] or '0') >= w or (tonumber(f[5] or '0') == w and tonumber(f[6] or '0') > now) then
  return {'hold', w, f[2], f[3], f[7]}
end
redis.call('HSET', L, 'claim', w, 'claimUntil', now + tonumber(ARGV[6]))
local st = redis.call('HMGET', L, 'limit', 'baseline', 'latency', 'mean', 'lastCut', 'resume', 'sinceDrain', 'drained', 'holdBaseline')
local win = redis.call('HGETALL', ARGV[1] .. 'ow:' .. string.format('%d', w - 1))
return {'due', w, f[2], f[3], f[7], st, win, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])}
