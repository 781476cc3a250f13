-- prelude.lua: helpers shared by every algorithm; the first part of tollgate's one script.
--
-- The script EVALSHA runs is prelude.lua, then the five algorithm files, then check.lua,
-- concatenated in that order by tollgate-redis (src/script.rs). Each algorithm file defines
-- one local function; check.lua reads KEYS/ARGV and calls them.
--
-- Numbers: Lua numbers are doubles, exact for integers below 2^53 (microseconds since the
-- epoch stay below that for 285 years). Every value written to Redis is formatted with
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
