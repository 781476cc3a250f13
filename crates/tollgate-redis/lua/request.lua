-- request.lua: decides one request's entries all or nothing; shared by check.lua (one request
-- per call) and batch.lua (several independent requests per call), so that what a request
-- means on Redis is written once.
--
-- Runs after prelude.lua and the five algorithm functions. It knows no algorithm: each entry's
-- tag names its function, and every function takes the same arguments and answers with a
-- verdict first (negative = refused); what the other values mean is the client's to read.
--
-- decide(k, a, n, op, now, server, reply) decides the n entries whose keys are
-- KEYS[k+1 .. k+n] and whose arguments are ARGV[a .. a+5n-1], five per entry: algorithm tag
-- (fw, sl, sw, tb, gcra), the entry's cost in units (1 ≤ cost ≤ its capacity; the caller
-- checked; entries may ask different costs) and three integer parameters (see each algorithm
-- file). op: 0 = peek (decide, write nothing), 1 = check (charge every entry if all admit,
-- else nothing), 2 = give back each entry's cost charged at `now` (cross-slot undo). It
-- appends four integers per entry to `reply`: what its function answered, padded with 0.

local algorithms = { fw = fixed_window, sl = sliding_log, sw = sliding_window,
  tb = token_bucket, gcra = gcra }

-- Entry i (1-based) of the request at (k, a), decided with `mode`.
local function run(k, a, i, now, server, mode)
  local b = a + 5 * (i - 1)
  local algorithm = algorithms[ARGV[b]]
  if not algorithm then error('tollgate: unknown algorithm tag ' .. tostring(ARGV[b])) end
  return algorithm(KEYS[k + i], now, tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
    tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), mode, server)
end

-- Appends one entry's answer to `reply`; whether it admits.
local function push(reply, verdict, b, c, d)
  local j = #reply
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4] = verdict, b or 0, c or 0, d or 0
  return verdict >= 0
end

local function decide(k, a, n, op, now, server, reply)
  -- One entry, or no charging: each entry on its own.
  if n == 1 or op ~= 1 then
    for i = 1, n do push(reply, run(k, a, i, now, server, op)) end
    return
  end
  -- Several entries: decide all first; charge only if every one admits.
  local base = #reply
  local all = true
  for i = 1, n do
    if not push(reply, run(k, a, i, now, server, 0)) then all = false end
  end
  if not all then return end
  for j = #reply, base + 1, -1 do reply[j] = nil end
  for i = 1, n do push(reply, run(k, a, i, now, server, 1)) end
end
