-- batch.lua: the coalesced script — decides M independent requests in one call, each all or
-- nothing on its own (a refused request charges nothing; its neighbours are decided as if
-- they had come alone, in order).
--
-- Runs after prelude.lua, the five algorithm functions and request.lua, like check.lua: each
-- request is decided by the same `decide`, so a batch means exactly what its requests would
-- mean sent one after the other, in batch order. The store sends a batch only for requests
-- that queued while a call to the same node (slot, on a cluster) was in flight; a lone request
-- goes out alone, with its own script (see src/store/coalesce.rs).
--
-- KEYS        every request's keys, request after request; all in one hash slot on a cluster
-- ARGV        request after request, each: a header h = op + 4 × c + 8 × n (op as in
--             check.lua, or 3: a check whose deadline follows; n its number of entries;
--             c = 1 when the clock follows as the next argument, as in check.lua, else the
--             server's, whose TIME is read once per batch), then its clock if c, its
--             deadline if op is 3 (µs on the server's clock, see `late` in prelude.lua), then
--             its entries (tag and arguments, see request.lua)
-- returns     request after request, each: { now, then each entry's answer } as check.lua
--             answers, concatenated into one array; a request whose deciding
--             raised an error (a key of another type, say) is instead one string, the error,
--             and its neighbours are still decided (what it wrote before failing stays, as
--             for check.lua); a request whose deadline had passed when the batch started is
--             the one string 'late <now>', and charged nothing

local reply = {}
local server_now
local k, a, last = 0, 1, #ARGV
local floor = math.floor
-- Skips the n entries whose arguments start at ARGV[a]: each is its tag (perhaps marked,
-- see request.lua) and three or four arguments.
local function skip(a, n)
  for _ = 1, n do
    if string.sub(ARGV[a], -4) == 'gcra' then a = a + 4 else a = a + 5 end
  end
  return a
end
while a <= last do
  local h = tonumber(ARGV[a])
  local op, n = h % 4, floor(h / 8)
  local now, server
  a = a + 1
  if floor(h / 4) % 2 == 1 then
    now, server = clock(ARGV[a])
    a = a + 1
  else
    if not server_now then server_now = clock('') end
    now, server = server_now, true
  end
  local base = #reply
  local too_late
  if op == 3 then
    op = 1
    if not server_now then server_now = clock('') end
    if server_now > tonumber(ARGV[a]) then too_late = 'late ' .. fmt(server_now) end
    a = a + 1
  end
  if too_late then
    reply[base + 1] = too_late
    a = skip(a, n)
  else
    reply[base + 1] = now
    local ok, next_a = pcall(decide, k, a, n, op, now, server, reply)
    if not ok then
      for j = #reply, base + 1, -1 do reply[j] = nil end
      local err = next_a
      if type(err) == 'table' then err = err.err end
      reply[base + 1] = 'tollgate: ' .. tostring(err)
      a = skip(a, n)
    else
      a = next_a
    end
  end
  k = k + n
end
return reply
