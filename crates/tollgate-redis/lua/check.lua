-- check.lua: tollgate's general script — decides N (limit, key) entries of one request all or
-- nothing.
--
-- Runs after prelude.lua, the five algorithm functions and request.lua (concatenated into one
-- script, so one EVALSHA and one SHA). Being Lua, it is atomic: no other command runs between
-- reading and writing, and no key can expire halfway through. The deciding itself is
-- request.lua's `decide`, shared with batch.lua.
--
-- KEYS[1..N]  one key per entry; all in one hash slot on a cluster (the caller groups them)
-- ARGV[1]     op: 0 = peek (decide, write nothing), 1 = check (charge every entry if all
--             admit, else nothing), 2 = give back each entry's cost charged at `now`
--             (cross-slot undo); a number above 2 is a check with that deadline (µs on the
--             server's clock, see `late` in prelude.lua)
-- ARGV[2]     the clock: '' = the server's (TIME); 's<µs>' = the server's, at that instant;
--             '<µs>' = the caller's, at that instant (µs since the epoch; see prelude.lua)
-- ARGV[3..]   the entries, one after the other, each its tag then its arguments (three or
--             five in all, see request.lua): entry 1 starts at ARGV[3]
-- returns     { now, then each entry's answer: one integer for GCRA, four for the others
--               (verdict first, negative = refused, padded with 0), see request.lua }, or
--             the string 'late <now>' when the deadline had passed (nothing written)

local too_late, now, server, op = start(ARGV[2], ARGV[1])
if too_late then return too_late end
local reply = { now }
decide(0, 3, #KEYS, op, now, server, reply)
return reply
