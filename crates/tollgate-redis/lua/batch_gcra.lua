-- batch_gcra.lua: the coalesced script of the most common batch — every request one GCRA
-- check of one key — deciding each on its own, in order, as if sent one after the other.
--
-- Composed as `local function gcra(key, inc, tau, op, now)`, the body lua/gcra.lua, `end`,
-- then this file (src/script.rs): the same GCRA as the single-entry script, so the algorithm
-- is still written once. Why a script of its own rather than lua/batch.lua: the general batch
-- reads each request's header and tag, dispatches, builds the four-value reply shape and reads
-- TIME once, which together cost Redis about as much as GCRA's own arithmetic; here a
-- decision is the body and its one or two commands (docs/benchmarks.md, "Coalesced calls").
--
-- KEYS     one key per request
-- ARGV[1]  the clock: '' = the server's (each request then takes inc and tau, two
--          arguments); 'c' = the caller's (each takes inc, tau and its own now in µs)
-- ARGV...  per request, in KEYS order: inc = cost × T (µs), tau = T × burst (µs)[, now]
-- returns  one value per request: GCRA's one integer as lua/gcra.lua answers it, or the
--          string 'tollgate: <error>' when deciding that request raised (its key holds
--          another type, say): its neighbours are still decided

local reply = {}
local caller = ARGV[1] == 'c'
local width = 2
if caller then width = 3 end
for i = 1, #KEYS do
  local a = 2 + (i - 1) * width
  local now
  if caller then now = tonumber(ARGV[a + 2]) end
  local ok, v = pcall(gcra, KEYS[i], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), 1, now)
  if not ok then
    if type(v) == 'table' then v = v.err end
    v = 'tollgate: ' .. tostring(v)
  end
  reply[i] = v
end
return reply
