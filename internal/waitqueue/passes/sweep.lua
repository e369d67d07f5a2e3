-- sweep.lua takes the passes idle for longer than a bound out of the
-- passes set and names those whose entry still holds its slot, for the
-- gate's sweeper to free as a leave frees them.
-- Invariant: a pass leaves the set in the step that finds it idle, on
-- Redis's clock, so of any number of gateways sweeping at once exactly
-- one frees each idle pass, and a pass used since (its score moved past
-- the bound) is never taken.
-- KEYS: the passes set. ARGV (sweepArgs, scripts.go): prefix, idle (ms),
-- the most to take.
-- Returns {seq, user, seq, user, …} of the admitted entries taken.
local prefix = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idle = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, seq in ipairs(idle) do
  redis.call('ZREM', KEYS[1], seq)
  local r = redis.call('HMGET', prefix .. 'e:' .. seq, 'status', 'user')
  if r[1] == 'admitted' then
    out[#out + 1] = seq
    out[#out + 1] = r[2] or ''
  end
end
return out
