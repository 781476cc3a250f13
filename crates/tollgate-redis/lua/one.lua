-- one.lua: the script for a request of exactly one entry (the common case), for every
-- algorithm but GCRA (whose single-entry script is one_gcra.lua then gcra.lua).
--
-- Composed as prelude.lua, ONE algorithm file, a line `local algorithm = <its function>`,
-- then this file — so Redis builds one algorithm's closure per call instead of five, and
-- nothing dispatches. Same contract as check.lua with N = 1:
--
-- KEYS[1]   the entry's key
-- ARGV[1]   op: 0 = peek, 1 = check, 2 = give back (see check.lua)
-- ARGV[2]   the clock: '' = the server's, 's<µs>' or '<µs>' = at that instant (prelude.lua)
-- ARGV[3]   cost, units
-- ARGV[4..7] algorithm tag (not read: the script is that algorithm's) and three parameters
-- returns   { now, allowed (1/0), remaining (units), reset_after (µs), retry_after (µs, -1 when allowed) }
local now = clock(ARGV[2])
return { now, algorithm(KEYS[1], now, tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7]), tonumber(ARGV[1])) }
