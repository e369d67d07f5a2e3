-- lookup.lua is lookup (lookup.lib.lua) alone. It writes nothing.
-- Invariant: the pointer and the status are read in one step, so a lookup
-- never pairs a user's entry with another entry's status.
-- KEYS and ARGV (lookupArgs, scripts.go): the user's pointer, the user's
-- bought count; the queue's prefix.
return lookup(KEYS[1], KEYS[2], ARGV[1])
