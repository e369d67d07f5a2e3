-- create_record.lua creates a record unless one exists.
--
-- KEYS: record. ARGV: owner, fp, queue, sku, quantity, ttlSeconds.
-- Invariant: the first submit of a token fixes its body; a later submit
-- with another fingerprint is told 'conflict' and changes nothing.
-- Returns {outcome (created|exists|conflict), fields...}.
local r = redis.call('HMGET', KEYS[1], 'owner', 'fp', 'queue', 'sku', 'quantity', 'status', 'reason', 'paymentId')
if r[1] then
  local outcome = 'exists'
  if r[2] ~= ARGV[2] or r[1] ~= ARGV[1] then outcome = 'conflict' end
  return {outcome, r[1], r[2], r[3], r[4], r[5], r[6], r[7] or '', r[8] or ''}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fp', ARGV[2], 'queue', ARGV[3], 'sku', ARGV[4],
  'quantity', ARGV[5], 'status', 'PENDING', 'reason', '', 'paymentId', '')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
return {'created', ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], 'PENDING', '', ''}
