-- prelude.lua: helpers shared by every algorithm; the first part of tollgate's one script.
--
-- The general script is prelude.lua, then the five algorithm files, then check.lua,
-- concatenated in that order by tollgate-redis (src/script/port.rs). Each algorithm file defines
-- one function, local to the script (gcra.lua is a body that src/script/port.rs wraps into one),
-- all taking (key, now, cost, p1, p2, p3, op, server); check.lua reads KEYS/ARGV and calls
-- them. The single-entry scripts are prelude.lua, one algorithm file and one.lua — except
-- GCRA's, one_gcra.lua then gcra.lua, which needs nothing from here.
--
-- Numbers: Lua numbers are doubles, exact for integers below 2^53 µs (2255-06-05). Every
-- instant a script computes must stay below it, not only now: now plus the largest window,
-- queue or debt it adds (crates/tollgate/src/rules.rs says how far that reaches). Every value written to Redis is formatted with
-- string.format('%d') — never '..' or tostring, which keep 14 significant digits.

local function fmt(x)
  return string.format('%d', x)
end

-- Milliseconds of expiry for state that is back to a full quota in `us` microseconds:
-- rounded up, plus one second of slack, so a key never expires before it has replenished
-- (a key that expires later is harmless: stale state decides like no state).
local function ttl_ms(us)
  if us < 0 then us = 0 end
  return fmt(math.floor((us + 999) / 1000) + 1000)
end

-- Before a write whose expiry is set after it (HSET, HINCRBY, ZADD, then PEXPIRE): fails
-- the script, before anything is written, when the user may not run that PEXPIRE (its
-- permission taken away while the store runs; the start-up check passed). Refused after the
-- write, it would leave a new key without an expiry, for good, and an existing one charged
-- for a request its limit's policy answered, with the expiry of its previous state (too
-- short: the key gone early, its units with it): Lua has no rollback. Asked of the ACL, not by running PEXPIRE: that would be the
-- script's first write, and Redis decides a script's out-of-memory refusal at its first
-- write (PEXPIRE adds no memory, so the writes after it would pass a full maxmemory).
-- redis.acl_check_cmd is Redis 7's; before it, nothing is asked.
local function may_expire(key)
  if redis.acl_check_cmd and not redis.acl_check_cmd('pexpire', key, '1') then
    error({ err = "NOPERM this user has no permissions to run the 'pexpire' command" })
  end
end

-- The instant to decide at, from ARGV[2]: '' = the server's clock (TIME); 's<µs>' = the
-- server's clock at that instant (a give-back of a cross-slot request, which must undo at the
-- instant it charged); '<µs>' = the caller's clock. Returns now, and whether it is the
-- server's clock (GCRA keeps its state differently on each, see gcra.lua).
local function clock(arg)
  local now = tonumber(arg)
  if now then return now, false end
  now = tonumber(string.sub(arg, 2))
  if not now then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  return now, true
end

-- A check's deadline (src/deadline.rs): the instant, in µs on this server's clock, after which
-- its caller has stopped waiting for the answer (its store timeout ran out while Redis was
-- frozen, busy or cut off). A script that starts after it must change nothing: the caller
-- already answered by its failure policy, and a refused or unanswered request must not be
-- charged. Returns the marker 'late <now>' then (now: this server's clock, from which the
-- caller sets the deadline of its next try), else nil; and the server's clock it read, which
-- a script on the server's clock decides at (one TIME, not two).
local function late(deadline)
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  if now > deadline then return 'late ' .. fmt(now), now end
  return nil, now
end

-- The instant to decide at for clock argument `arg` (see `clock`) and op argument `op`: a
-- number above 2 is a check with that deadline. Returns the marker of a late script (its
-- caller does nothing more), or nil, then now, whether it is the server's clock, and the op.
local function start(arg, op)
  op = tonumber(op) or 1
  if op > 2 then
    local too_late, real = late(op)
    if too_late then return too_late end
    if arg == '' then return nil, real, true, 1 end
    op = 1
  end
  local now, server = clock(arg)
  return nil, now, server, op
end
