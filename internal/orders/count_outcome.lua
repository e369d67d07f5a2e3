-- count_outcome.lua counts a finished order once.
--
-- KEYS: the queue's outcome hash, the order's counted marker (both under
-- the queue's hash tag). ARGV: status, marker TTL in seconds.
-- Invariant: an order is counted at most once while its marker lives (a
-- day), however often it is finished again: a redelivery, a duplicate
-- request past the stream's dedup window.
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  return 1
end
return 0
