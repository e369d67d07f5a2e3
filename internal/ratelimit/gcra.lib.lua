-- gcra.lib.lua defines gcra(KEYS, ARGV), the decision of one request
-- against every limit given, atomically, for a script that decides a
-- request's limits in the same step as its own work (a join's lookup: one
-- round trip where two were); Allow's script (gcra.lua) is it alone. Plan
-- gives the call's keys and arguments and reads its reply.
--
-- KEYS: one TAT key per limit. ARGV: now (µs), then per limit its emission
-- interval (µs) and burst.
-- Invariant: for each key, the requests allowed in any span of d µs number
-- at most burst + d/interval; a request is charged to every key or, when
-- any key refuses it, to none, so a refused request never eats budget.
-- Numbers go back to Redis through string.format('%.0f') because Lua's
-- default conversion keeps only 14 digits, and microsecond times have 16.
-- Returns {allowed, then per key: allowed, remaining, retryAfterµs, resetAfterµs}.
local function gcra(KEYS, ARGV)
  local now = tonumber(ARGV[1])
  local allowed = 1
  local out = {0}
  local tats = {}
  for i = 1, #KEYS do
    local interval = tonumber(ARGV[2 * i])
    local burst = tonumber(ARGV[2 * i + 1])
    local tat = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
    if tat < now then tat = now end
    local newTat = tat + interval
    local diff = now - (newTat - burst * interval)
    local base = 4 * (i - 1) + 2
    if diff < 0 then
      allowed = 0
      out[base], out[base + 1], out[base + 2], out[base + 3] = 0, 0, -diff, tat - now
    else
      out[base], out[base + 1], out[base + 2], out[base + 3] = 1, math.floor(diff / interval), 0, newTat - now
    end
    tats[i] = newTat
  end
  out[1] = allowed
  if allowed == 1 then
    for i = 1, #KEYS do
      local ttl = math.ceil((tats[i] - now) / 1000) + 1
      redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', string.format('%.0f', ttl))
    end
  end
  return out
end
