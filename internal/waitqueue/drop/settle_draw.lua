-- settle_draw.lua turns up to a batch (ARGV from 3: settleArgs, scripts.go)
-- of drawn records from 'pre' into 'waiting' and takes them out of the
-- pre-queue set, after the draw; the admitter calls it until nothing is
-- left, a batch at a time so that Redis is never busy for long. Invariant:
-- nothing before the draw; no record leaves the pre-queue without a place
-- in line (one the draw did not place queues FIFO). Returns how many are
-- left.
local batch = tonumber(ARGV[3])
if not redis.call('HGET', ST, 'drawn') then return 0 end
local pre = P .. 'pre'
for _, seq in ipairs(redis.call('ZRANGE', pre, 0, batch - 1)) do
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
