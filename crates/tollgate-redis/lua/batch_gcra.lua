-- batch_gcra.lua: the coalesced script of the most common batch — every request one GCRA
-- check of one key — deciding each on its own, in order, as if sent one after the other.
--
-- Composed as `local last_ms, last_px` (the body's one memo, see gcra.lua), `local function
-- gcra(key, inc, tau, op, now, whole)`, the body lua/gcra.lua, `end`, then this file
-- (src/script/port.rs): the same GCRA as the single-entry script, so the algorithm is still
-- written once. Why a script of its own rather than lua/batch.lua: the general batch reads
-- each request's header and tag, dispatches, builds the four-value reply shape and reads TIME
-- once, which together cost Redis about as much as GCRA's own arithmetic; here a decision is
-- the body and its one or two commands (docs/benchmarks.md, "Coalesced calls").
--
-- KEYS     one key per request
-- ARGV[1]  the clock: '' = the server's; 'c' = the caller's (each request then has its own now);
--          either followed by the batch's deadline, the earliest of its requests' (µs on the
--          server's clock; see `late` in prelude.lua): a batch that starts after it decides
--          nothing and answers 'late <now>' for every request
-- ARGV...  the requests, in KEYS order, in runs of requests that ask alike (one limit, one
--          cost: a coalesced batch is mostly one run): per run `n`, inc = cost × T (µs),
--          tau = T × burst (µs) and whole ('1' when T is a whole number of ms, see gcra.lua),
--          then on the caller's clock the n requests' own now (µs). Said once per run rather
--          than once per request, these cost Redis three arguments less to read per decision
--          (docs/benchmarks.md).
-- returns  one value per request: GCRA's one integer as lua/gcra.lua answers it, or the
--          string 'tollgate: <error>' when deciding that request raised (its key holds
--          another type, say): its neighbours are still decided; or 'late <now>' for all
--
-- Two things this file does only for Redis's CPU (measured with bench/callgrind.sh, a batch of
-- 11: 5 % of Redis's instructions per decision together):
-- * The reply is written over KEYS, an array Redis has already sized to one slot a request
--   (a plain table Redis builds afresh for each call): each KEYS[i] is read before its slot
--   is overwritten, and a fresh table would grow (and move) four times on the way to 11
--   values.
-- * `pcall` guards a request only where the body can raise for that key alone: where it may
--   send a `GET` (the caller's clock, or an `inc` that is not a whole number of ms: the
--   body's own condition), which fails on a key of another type. Otherwise the body sends
--   `PTTL`, `PEXPIRE` and `SET` only, which take a key of any type; the one error left
--   there, Redis refusing a write when out of memory, is raised only at a script's first
--   write (Redis never stops a script between writes), so it fails the whole batch before it
--   has charged anything, and every request in it gets the store's error, as a failed call
--   does.

local reply = KEYS
local caller = string.byte(ARGV[1], 1) == 99 -- 'c'
local deadline
if caller then deadline = tonumber(string.sub(ARGV[1], 2)) else deadline = tonumber(ARGV[1]) end
if deadline then
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  if now > deadline then
    local too_late = 'late ' .. string.format('%d', now)
    for j = 1, #KEYS do reply[j] = too_late end
    return reply
  end
end
local a, i = 2, 1
while i <= #KEYS do
  local n, inc, tau = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local whole = ARGV[a + 3] == '1'
  if not (n and inc and tau) or n < 1 or i + n - 1 > #KEYS then
    return redis.error_reply('tollgate: malformed batch at argument ' .. a)
  end
  a = a + 4
  local guarded = caller or inc % 1000 ~= 0
  for _ = 1, n do
    local now
    if caller then
      now = tonumber(ARGV[a])
      a = a + 1
    end
    local ok, v
    if guarded then
      ok, v = pcall(gcra, KEYS[i], inc, tau, 1, now, whole)
    else
      ok, v = true, gcra(KEYS[i], inc, tau, 1, now, whole)
    end
    if not ok then
      if type(v) == 'table' then v = v.err end
      v = 'tollgate: ' .. tostring(v)
    end
    reply[i] = v
    i = i + 1
  end
end
return reply
