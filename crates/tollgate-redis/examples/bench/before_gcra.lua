-- before_gcra.lua: a reference point of the benchmark, never used by the store. GCRA's
-- single-entry script as it was before the local tier (issue #12), at commit 9f97268:
-- lua/one_gcra.lua then lua/gcra.lua of that commit, unchanged below this header. The "before"
-- row of the coalescing table runs it, one EVALSHA per decision, so that the row measures the
-- old code's Redis work rather than today's single-entry script.
-- one_gcra.lua: the single-entry script of GCRA, the most common and cheapest request.
--
-- Composed as this file then gcra.lua (a function body): no prelude, no closure, and on the
-- server's clock two or three Redis commands (PTTL, GET when the key is not yet full, SET
-- when admitted) and two arguments. Contract:
--
-- KEYS[1]  the key
-- ARGV[1]  inc = cost × T (µs)
-- ARGV[2]  tau = T × burst (µs)
-- ARGV[3]  op (see gcra.lua); absent = 1, check
-- ARGV[4]  now, µs since the epoch on the caller's clock; absent, empty or 's…' = the
--          server's clock
-- returns  one integer, as gcra.lua says
local key, inc, tau = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local op, now = tonumber(ARGV[3]) or 1, tonumber(ARGV[4])
-- gcra.lua: the generic cell rate algorithm, one deadline per key.
-- Mirrors crates/tollgate/src/rules/gcra.rs exactly.
--
-- This file is a function BODY, not a function: tollgate-redis (src/script.rs) composes it
-- twice, so that the algorithm is written once and its hot path pays for no closure:
-- * the single-entry GCRA script is one_gcra.lua (which binds the inputs below from KEYS and
--   ARGV) followed by this body;
-- * the general script wraps it into the function `gcra(key, now, inc, tau, op)`,
--   called by check.lua.
--
-- Inputs   key  the key
--          now  µs since the epoch on the caller's clock, or nil for the server's clock
--          inc  cost × T: the units asked for, in µs (T = emission interval, ceil(period/limit))
--          tau  T × burst (µs): how far ahead of now the theoretical arrival time may run
--          op   0 = decide only, 1 = decide and charge when admitted, 2 = give back `inc`
--               charged just before
-- Returns  one integer. Admitted: `used` ≥ 0, the theoretical arrival time `tat` minus now
--          after the call. Denied: −1 − `used` before the call (nothing written). The caller
--          derives remaining, reset_after and retry_after from it with the same arithmetic as
--          the Rust rule: remaining = ⌊(tau − used)/T⌋, reset_after = used, retry_after =
--          used + inc − tau.
--
-- State, by clock:
-- * Server's clock (production): `tat` is in the key's expiry. Redis keeps expiries in ms, so
--   the key expires one second (the slack every tollgate key gets) after `tat` rounded up to
--   the ms, and its value holds the µs below that ms: tat = (expiry_ms − 1000) × 1000 − value,
--   value in 0..999. `PTTL` then reads tat − now on Redis's own clock — no `TIME`, no absolute
--   time parsed — and a key within its last second (PTTL ≤ 1000) is full without a `GET`. The
--   slack keeps a key that is called again soon after it is full from being deleted and
--   created anew on every call. Now is Redis's millisecond clock (as for every key expiry), so
--   a decision may be up to 1 ms more cautious than with a µs clock, never less. A value
--   outside 0..999 (a key written on a caller's clock) counts as 0: the key then reads as at
--   least as spent as it is, never less.
-- * Caller's clock (tests, simulations): the value is `tat` in µs and the expiry tat − now
--   plus the same second of slack, rounded up to ms (Redis's clock and the caller's are
--   unrelated).
-- Every write sets the expiry; a denied call writes nothing; a key found without an expiry
-- reads as full and is rewritten with one at its next admit.
local used = 0
if now then
  local tat = tonumber(redis.call('GET', key))
  if tat and tat > now then used = tat - now end
else
  local ms = redis.call('PTTL', key) - 1000
  if ms > 0 then
    local below = tonumber(redis.call('GET', key)) or 0
    if below < 0 or below > 999 then below = 0 end
    used = ms * 1000 - below
  end
end
if op == 2 then
  used = used - inc
  if used <= 0 then
    redis.call('DEL', key)
    return 0
  end
else
  local after = used + inc
  if after > tau then return -1 - used end
  if op ~= 1 then return used end
  used = after
end
if now then
  redis.call('SET', key, string.format('%d', now + used), 'PX',
    string.format('%d', math.floor((used + 999) / 1000) + 1000))
else
  local ms = math.floor((used + 999) / 1000)
  -- Always 0 when T is a whole number of ms (most quotas): no formatting then.
  local below = ms * 1000 - used
  if below == 0 then below = '0' else below = string.format('%d', below) end
  redis.call('SET', key, below, 'PX', string.format('%d', ms + 1000))
end
return used
