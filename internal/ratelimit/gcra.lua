-- gcra.lua is Allow's script: gcra (gcra.lib.lua) alone, whose invariant
-- it keeps — a request is charged to every limit or, when any refuses it,
-- to none.
return gcra(KEYS, ARGV)
