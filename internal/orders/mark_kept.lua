-- mark_kept.lua says Redis holds every order record again, for the
-- put-back that began with mark ARGV[1].
--
-- KEYS: the kept marker (keyspace.OrderRecordsKept). ARGV: the mark.
-- Invariant: only a put-back that began after Redis's last loss marks the
-- records kept. A loss during a put-back (a FLUSHALL, a node replaced
-- empty) also took its mark, so that put-back cannot claim records it
-- wrote before the loss: the next check puts them back again.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], '1')
return 1
