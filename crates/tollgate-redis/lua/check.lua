-- check.lua: tollgate's one script — decides N (limit, key) entries all or nothing.
--
-- Runs after prelude.lua and the five algorithm files (concatenated into one script, so one
-- EVALSHA and one SHA; gcra.lua wrapped as `local function gcra(key, now, inc, tau, op)`).
-- Being Lua, it is atomic: no other command runs between reading and writing, and no key
-- can expire halfway through.
--
-- KEYS[1..N]  one key per entry; all in one hash slot on a cluster (the caller groups them)
-- ARGV[1]     op: 0 = peek (decide, write nothing), 1 = check (charge every entry if all
--             admit, else nothing), 2 = give back `cost` charged at `now` (cross-slot undo)
-- ARGV[2]     the clock: '' = the server's (TIME); 's<µs>' = the server's, at that instant;
--             '<µs>' = the caller's, at that instant (µs since the epoch; see prelude.lua)
-- ARGV[3]     cost, units (1 ≤ cost ≤ every entry's capacity; the caller checked)
-- ARGV[4i..4i+3] for entry i (1-based; ARGV[4..7] is entry 1): algorithm tag
--             (fw, sl, sw, tb, gcra) and three integer parameters, see each algorithm file
-- returns     { now, then for each entry: allowed (1/0), remaining (units),
--               reset_after (µs), retry_after (µs, -1 when allowed) }

local op = tonumber(ARGV[1])
local now, server = clock(ARGV[2])
-- GCRA on the server's clock reads time from its key's expiry, not from `now`.
local gcra_now = now
if server then gcra_now = nil end
local cost = tonumber(ARGV[3])

-- Entry i's function and parameters, its arguments being ARGV[4i .. 4i+3].
local function run(i, mode)
  local a = 4 * i
  local alg = ARGV[a]
  local p1, p2, p3 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  if alg == 'gcra' then
    -- GCRA answers with one integer (see gcra.lua), turned here into the common four.
    local inc, tau = cost * p1, p2
    local r = gcra(KEYS[i], gcra_now, inc, tau, mode)
    local allowed, used, retry = 1, r, -1
    if r < 0 then allowed, used = 0, -1 - r; retry = used + inc - tau end
    local left = tau - used
    if left < 0 then left = 0 end
    return allowed, math.floor(left / p1), used, retry
  elseif alg == 'fw' then
    return fixed_window(KEYS[i], now, cost, p1, p2, p3, mode)
  elseif alg == 'sl' then
    return sliding_log(KEYS[i], now, cost, p1, p2, p3, mode)
  elseif alg == 'sw' then
    return sliding_window(KEYS[i], now, cost, p1, p2, p3, mode)
  elseif alg == 'tb' then
    return token_bucket(KEYS[i], now, cost, p1, p2, p3, mode)
  end
  error('tollgate: unknown algorithm tag ' .. tostring(alg))
end

local n = #KEYS
-- One entry (the common case), or no charging: each entry on its own, one reply table.
if n == 1 then
  return { now, run(1, op) }
end
local reply = { now }
local function push(allowed, remaining, reset, retry)
  local k = #reply
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] = allowed, remaining, reset, retry
end
if op ~= 1 then
  for i = 1, n do push(run(i, op)) end
  return reply
end

-- Several entries: decide all first; charge only if every one admits.
local all = true
for i = 1, n do
  local allowed, remaining, reset, retry = run(i, 0)
  if allowed == 0 then all = false end
  push(allowed, remaining, reset, retry)
end
if not all then return reply end
reply = { now }
for i = 1, n do push(run(i, 1)) end
return reply
