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
--             (cross-slot undo)
-- ARGV[2]     the clock: '' = the server's (TIME); 's<µs>' = the server's, at that instant;
--             '<µs>' = the caller's, at that instant (µs since the epoch; see prelude.lua)
-- ARGV[5i-2..5i+2] for entry i (1-based; ARGV[3..7] is entry 1): algorithm tag
--             (fw, sl, sw, tb, gcra), the entry's cost in units (1 ≤ cost ≤ its capacity;
--             the caller checked; entries may ask different costs) and three integer
--             parameters, see each algorithm file
-- returns     { now, then four integers per entry: what its function answered (verdict
--               first, negative = refused), padded with 0 to four }

local now, server = clock(ARGV[2])
local reply = { now }
decide(0, 3, #KEYS, tonumber(ARGV[1]), now, server, reply)
return reply
