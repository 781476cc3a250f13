-- textbook_gcra.lua: a plain floating-point GCRA, the comparison point of the benchmark only
-- (never used by the store). Written from the algorithm's description: time in float
-- seconds, the theoretical arrival time stored as a float string, replies as strings.
--
-- KEYS[1]  the key (a string: tat, float seconds)
-- ARGV     burst (units), rate (units per period), period (s), cost (units)
-- returns  { allowed units, remaining, retry_after (s, string; -1 if allowed), reset_after (s, string) }
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local interval = period / rate
local tolerance = interval * burst

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then
  tat = now
end

local new_tat = tat + cost * interval
local earliest = new_tat - tolerance
local wait = earliest - now
if wait > 0 then
  return { 0, 0, tostring(wait), tostring(tat - now) }
end

local remaining = math.floor((now - earliest) / interval)
local reset_after = new_tat - now
redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset_after))
return { cost, remaining, '-1', tostring(reset_after) }
