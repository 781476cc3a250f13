-- one_gcra.lua: the single-entry script of GCRA, the most common and cheapest request.
--
-- Composed as this file then gcra.lua (a function body): no prelude, no closure, and on the
-- server's clock one to three Redis commands (PTTL; GET when the key is not yet full and T
-- is not a whole number of ms; PEXPIRE or SET when admitted) and three arguments. Contract:
--
-- KEYS[1]  the key
-- ARGV[1]  inc = cost × T (µs)
-- ARGV[2]  tau = T × burst (µs)
-- ARGV[3]  '1' when T is a whole number of ms, else '0' (`whole` in gcra.lua)
-- ARGV[4]  op (see gcra.lua); absent = 1, check; above 2, a check with that deadline (µs on
--          the server's clock: one TIME more, see `late` in prelude.lua)
-- ARGV[5]  now, µs since the epoch on the caller's clock; absent, empty or 's…' = the
--          server's clock ('s<µs>' on a give-back: `at` in gcra.lua)
-- returns  one integer, as gcra.lua says, or 'late <now>' when the deadline had passed
--          (nothing written)
local key, inc, tau, whole = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local op, now = tonumber(ARGV[4]) or 1, tonumber(ARGV[5])
-- A give-back on the server's clock ('s<µs>'): its charge's instant, or an earlier one.
local at
if op == 2 and not now and ARGV[5] then at = tonumber(string.sub(ARGV[5], 2)) end
if op > 2 then
  local t = redis.call('TIME')
  local server_now = t[1] * 1000000 + t[2]
  if server_now > op then return 'late ' .. string.format('%d', server_now) end
  op = 1
end
local last_ms, last_px
