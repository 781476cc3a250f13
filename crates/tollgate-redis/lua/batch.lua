-- batch.lua: the coalesced script — decides M independent requests in one call, each all or
-- nothing on its own (a refused request charges nothing; its neighbours are decided as if
-- they had come alone, in order).
--
-- Runs after prelude.lua, the five algorithm functions and request.lua, like check.lua: each
-- request is decided by the same `decide`, so a batch means exactly what its requests would
-- mean sent one after the other, in batch order. The store sends a batch only for requests
-- that queued while a call to the same node (slot, on a cluster) was in flight; a lone request
-- goes out alone, with its own script (see src/coalesce.rs).
--
-- KEYS        every request's keys, request after request; all in one hash slot on a cluster
-- ARGV        request after request, each: op (as in check.lua), the clock (as in check.lua;
--             the server's TIME is read once per batch), n (its number of entries), then five
--             arguments per entry (tag, cost, three parameters, as in check.lua)
-- returns     request after request, each: { now, then four integers per entry } as
--             check.lua answers, concatenated into one array; a request whose deciding
--             raised an error (a key of another type, say) is instead one string, the error,
--             and its neighbours are still decided (what it wrote before failing stays, as
--             for check.lua)

local reply = {}
local server_now
local k, a = 0, 1
while a <= #ARGV do
  local op, at, n = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
  local now, server
  if at == '' then
    if not server_now then server_now = clock('') end
    now, server = server_now, true
  else
    now, server = clock(at)
  end
  local base = #reply
  reply[base + 1] = now
  local ok, err = pcall(decide, k, a + 3, n, op, now, server, reply)
  if not ok then
    for j = #reply, base + 1, -1 do reply[j] = nil end
    if type(err) == 'table' then err = err.err end
    reply[base + 1] = 'tollgate: ' .. tostring(err)
  end
  k, a = k + n, a + 3 + 5 * n
end
return reply
