-- check.lua: tollgate's one script — decides N (limit, key) entries all or nothing.
--
-- Runs after prelude.lua and the five algorithm files (concatenated into one script, so one
-- EVALSHA and one SHA). Being Lua, it is atomic: no other command runs between reading and
-- writing, and no key can expire halfway through.
--
-- KEYS[1..N]  one key per entry; all in one hash slot on a cluster (the caller groups them)
-- ARGV[1]     op: 0 = peek (decide, write nothing), 1 = check (charge every entry if all
--             admit, else nothing), 2 = give back `cost` charged at `now` (cross-slot undo)
-- ARGV[2]     now, µs since the epoch; empty = the server's clock (TIME)
-- ARGV[3]     cost, units (1 ≤ cost ≤ every entry's capacity; the caller checked)
-- ARGV[4i..4i+3] for entry i (1-based; ARGV[4..7] is entry 1): algorithm tag
--             (fw, sl, sw, tb, gcra) and three integer parameters, see each algorithm file
-- returns     { now, then for each entry: allowed (1/0), remaining (units),
--               reset_after (µs), retry_after (µs, -1 when allowed) }

local op = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local cost = tonumber(ARGV[3])

-- Entry i's function and parameters, its arguments being ARGV[4i .. 4i+3].
local function run(i, mode)
  local a = 4 * i
  local alg = ARGV[a]
  local p1, p2, p3 = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  if alg == 'gcra' then
    return gcra(KEYS[i], now, cost, p1, p2, p3, mode)
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
