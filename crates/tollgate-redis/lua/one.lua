-- one.lua: the single-entry script of every algorithm whose function answers four values
-- (all but GCRA, whose single-entry script is one_gcra.lua then gcra.lua).
--
-- Composed as prelude.lua, ONE algorithm file, a line `local algorithm = <its function>`,
-- then this file — so Redis builds one algorithm's closure per call instead of five, and
-- nothing dispatches. Like every single-entry script, it takes the entry's own arguments
-- first and op and clock last, left out for the common call (a check on the server's clock):
-- every argument costs Redis a string to build and parse.
--
-- KEYS[1]   the entry's key
-- ARGV[1]   cost, units
-- ARGV[2..4] the algorithm's three parameters (as in check.lua, after the tag and cost)
-- ARGV[5]   op: 0 = peek, 1 = check, 2 = give back (see check.lua); absent = 1, check; above
--           2, a check with that deadline (check.lua)
-- ARGV[6]   the clock: '' or absent = the server's, 's<µs>' or '<µs>' = at that instant
--           (prelude.lua)
-- returns   { now, verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--             retry_after (µs, -1 when admitted) }, or 'late <now>' (check.lua)
local too_late, now, server, op = start(ARGV[6] or '', ARGV[5])
if too_late then return too_late end
return { now, algorithm(KEYS[1], now, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), op, server) }
