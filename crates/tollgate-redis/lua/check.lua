-- check.lua: tollgate's one script — decides N (limit, key) entries all or nothing.
--
-- Runs after prelude.lua and the five algorithm functions (concatenated into one script, so
-- one EVALSHA and one SHA). Being Lua, it is atomic: no other command runs between reading
-- and writing, and no key can expire halfway through. It knows no algorithm: each entry's tag
-- names its function, and every function takes the same arguments and answers with a verdict
-- first (negative = refused); what the other values mean is the client's to read.
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

local op = tonumber(ARGV[1])
local now, server = clock(ARGV[2])
local algorithms = { fw = fixed_window, sl = sliding_log, sw = sliding_window,
  tb = token_bucket, gcra = gcra }

-- Entry i's function, cost and parameters, its arguments being ARGV[5i-2 .. 5i+2].
local function run(i, mode)
  local a = 5 * i - 2
  local algorithm = algorithms[ARGV[a]]
  if not algorithm then error('tollgate: unknown algorithm tag ' .. tostring(ARGV[a])) end
  return algorithm(KEYS[i], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), mode, server)
end

local reply = { now }
local function push(verdict, b, c, d)
  local k = #reply
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] = verdict, b or 0, c or 0, d or 0
  return verdict >= 0
end
local n = #KEYS
-- One entry, or no charging: each entry on its own.
if n == 1 or op ~= 1 then
  for i = 1, n do push(run(i, op)) end
  return reply
end

-- Several entries: decide all first; charge only if every one admits.
local all = true
for i = 1, n do
  if not push(run(i, 0)) then all = false end
end
if not all then return reply end
reply = { now }
for i = 1, n do push(run(i, 1)) end
return reply
