-- lookup.lib.lua finds the current entry of a user, if any, and how many
-- units the user bought in the queue: lookup(pointer key, bought key,
-- prefix) returns {seq or the empty string, status or the empty string,
-- bought}. Invariant: it only reads, the pointer and the entry's status in
-- one step.
local function lookup(uk, bk, prefix)
  local bought = tonumber(redis.call('GET', bk) or '0')
  local cur = redis.call('GET', uk)
  if not cur then return {'', '', bought} end
  return {cur, redis.call('HGET', prefix .. 'e:' .. cur, 'status') or 'unknown', bought}
end
