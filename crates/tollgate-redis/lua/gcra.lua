-- gcra.lua: the generic cell rate algorithm, one deadline per key.
-- Mirrors crates/tollgate/src/rules/gcra.rs exactly.
--
-- This file is a function BODY, not a function: tollgate-redis (src/script/port.rs) composes it
-- twice, so that the algorithm is written once and its hot path pays for no closure:
-- * the single-entry GCRA script is one_gcra.lua (which binds the inputs below from KEYS and
--   ARGV) followed by this body;
-- * the general script wraps it into the function every algorithm has,
--   `gcra(key, now, cost, t, tau, whole, op, server)`, which binds inc = cost × T and, on
--   the server's clock, now = nil (src/script/port.rs, GCRA's row of the table), called by
--   check.lua.
--
-- Inputs   key  the key
--          now  µs since the epoch on the caller's clock, or nil for the server's clock
--          inc  cost × T: the units asked for, in µs (T = emission interval, ceil(period/limit))
--          tau  T × burst (µs): how far ahead of now the theoretical arrival time may run
--          op   0 = decide only, 1 = decide and charge when admitted, 2 = give back `inc`
--               charged just before
--          at   a give-back on the server's clock: the charge's instant, or an earlier one
--               (µs on the server's clock; nil: just now). Only what the state may still
--               hold of that charge is given back, `inc` less the time since `at`: a key
--               that refilled and was charged again since must not get its new charge
--               back (a late give-back of an unanswered check, `src/store/unanswered.rs`,
--               used to erase the next caller's charge: two admitted of a burst of one).
--               Whatever happened since, the state holds at least that much of the charge
--               (each later charge at t leaves of it at least tat_A − t ≥ at + inc − now).
--          whole  whether T is a whole number of ms (most quotas): every `inc` of the limit
--               then is too, and on the server's clock its keys' values are never read
-- Returns  one integer, its sign the verdict. Admitted: `used` ≥ 0, the theoretical arrival
--          time `tat` minus now after the call. Denied: −1 − `used` before the call (nothing
--          written), raised if need be so that the same arithmetic refuses too (see the
--          server's clock below). The client derives remaining, reset_after and retry_after
--          from it with the Rust rule itself (tollgate::rules::Gcra): remaining =
--          ⌊(tau − used)/T⌋, reset_after = used, retry_after = used + inc − tau.
--
-- State, by clock:
-- * Caller's clock (tests, simulations): exact. The value is `tat` in µs, the expiry tat − now
--   plus a second of slack, rounded up to ms (Redis's clock and the caller's are unrelated).
-- * Server's clock (production): `tat` is in the key's expiry, which Redis keeps in ms: the key
--   expires 999 ms after `tat` rounded up to the ms, and its value holds the µs below that ms:
--   tat = (expiry_ms − 999) × 1000 − value, value in 0..999. `PTTL` then reads tat − now on
--   Redis's own clock — no `TIME`, no absolute time parsed — and a key with PTTL ≤ 999 is full
--   without a `GET`. The slack keeps a key that is called again soon after it is full from
--   being deleted and created anew on every call.
--   Redis's clock is in ms: the true instant t is somewhere in [lo, lo + 1 ms), lo being the
--   start of the ms PTTL counts from. Each step takes the end that errs towards refusing: the
--   state is read as of lo (the most time still owed), and a key found full is charged from
--   lo + 1 ms (the latest t can be). So the stored `tat` is never earlier than the exact rule's
--   and no decision is more permissive than the µs rule; each end costs under 1 ms, so a unit
--   passes at most 2 ms later than it would on a µs clock. (Charging a full key from lo let
--   `tat` start up to 1 ms early, and a hot key took one unit more than its ceiling.) Replies
--   are as of lo + 1 ms, the instant a charge starts from: an admit tells `tat` − (lo + 1 ms),
--   a refusal the wait from then (at least 1 µs: refused at lo, the cost passes at lo + 1 ms).
--   A value outside 0..999 (a key written on a caller's clock) counts as 0: the key then reads
--   as at least as spent as it is, never less.
--   With `whole`, an admit on a key that exists only moves its expiry (`PEXPIRE`, under a
--   third of the cost of `SET … PX` in Redis, docs/benchmarks.md): the value is left as it
--   is, which no reader of this limit reads (nor its type: a key of another type keeps it,
--   and its expiry). (A value a sub-ms T left, before a reload made T whole, stays: were T
--   made sub-ms again by a later reload, the key's next read would find it up to 999 µs less
--   spent than it is, once, since that read's write sets the value.)
-- Every write sets the expiry; a denied call writes nothing; a key found without an expiry
-- reads as full and is rewritten with one at its next admit.
--
-- Below, `used` is tat − lo (lo = now on the caller's clock) and `skew` what lo + skew is the
-- latest the true instant can be: 0 on the caller's clock, 1 ms on the server's.
local used, skew, pttl = 0, 0, -2
if now then
  local tat = tonumber(redis.call('GET', key))
  if tat and tat > now then used = tat - now end
else
  skew = 1000
  pttl = redis.call('PTTL', key)
  local ms = pttl - 999
  if ms > 0 then
    -- With inc a whole number of ms (cost × T; most quotas), every value this script writes
    -- is 0 (see the SET below), so the GET is skipped: a value left by another quota reads
    -- as 0 too, the key then as up to 999 µs more spent than it is, never less.
    local below = 0
    if inc % 1000 ~= 0 then
      below = tonumber(redis.call('GET', key)) or 0
      if below < 0 or below > 999 then below = 0 end
    end
    used = ms * 1000 - below
  end
end
if op == 2 then
  if at then
    local c = redis.call('TIME')
    local back = at + inc - (c[1] * 1000000 + c[2])
    if back <= 0 then
      if used < skew then return 0 end
      return used - skew
    end
    if back < inc then inc = back end
  end
  used = used - inc
  if used <= 0 then
    redis.call('DEL', key)
    return 0
  end
else
  if used + inc > tau then
    used = used - skew
    if used + inc <= tau then used = tau - inc + 1 end
    -- A cost above the burst (a shadow entry's, clamped to capacity + 1: inc > tau) on a key
    -- owing under skew: never negative, which would read as an admit.
    if used < 0 then used = 0 end
    return -1 - used
  end
  if op ~= 1 then
    if used < skew then return 0 end
    return used - skew
  end
  if used < skew then used = skew end
  used = used + inc
end
if now then
  redis.call('SET', key, string.format('%d', now + used), 'PX',
    string.format('%d', math.floor((used + 999) / 1000) + 1000))
else
  local ms = math.floor((used + 999) / 1000)
  -- The expiry's argument is formatted only when its ms differ from the last this call
  -- formatted (`last_ms`, `last_px`, which every composition declares before this body):
  -- a key admitted below its rate, as most keys are, ends at skew + inc, the same ms for
  -- every such key of one limit and cost, so a batch of them formats it once.
  -- (`string.format` costs Redis ~2k instructions, a tenth of a batched decision;
  -- docs/benchmarks.md.)
  if ms ~= last_ms then last_ms, last_px = ms, string.format('%d', ms + 999) end
  if whole and pttl >= 0 then
    redis.call('PEXPIRE', key, last_px)
  else
    -- Always 0 when T is a whole number of ms: no formatting then.
    local below = ms * 1000 - used
    if below == 0 then below = '0' else below = string.format('%d', below) end
    redis.call('SET', key, below, 'PX', last_px)
  end
end
if used < skew then return 0 end
return used - skew
