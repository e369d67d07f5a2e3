-- put_record.lua writes a record from the truth.
--
-- KEYS: record. ARGV: the record's fields in recordFields order, ttlSeconds.
-- Invariant: a final status is never overwritten by PENDING, so a late
-- writer cannot move an order back.
local cur = redis.call('HGET', KEYS[1], 'status')
if ARGV[6] == 'PENDING' and cur and cur ~= 'PENDING' then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fp', ARGV[2], 'queue', ARGV[3], 'sku', ARGV[4],
  'quantity', ARGV[5], 'status', ARGV[6], 'reason', ARGV[7], 'paymentId', ARGV[8])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[9]))
return 1
