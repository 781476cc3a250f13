-- lease.lua: the lease tier's one call on a fixed window key: give back, then take.
-- Composed as prelude.lua then this file (src/lease.rs). The key and its state are the fixed
-- window's ("<window start µs>:<units counted in it>", lua/fixed_window.lua), so exact and
-- lease-mode checks of one key count the same units.
--
-- KEYS[1]  the key
-- ARGV[1]  limit (units)
-- ARGV[2]  period (µs)
-- ARGV[3]  want: the most units to take (0: a give-back alone)
-- ARGV[4]  need: the fewest worth taking; fewer available takes none (a refusal)
-- ARGV[5]  give back: unspent units of an earlier lease
-- ARGV[6]  the window (start, µs) they were taken in: given back only if it is still the
--          key's current window (units of an ended window are worthless, and must not be
--          added to the next one)
-- ARGV[7]  the clock: '' or absent = the server's, '<µs>' = the caller's (prelude.lua)
-- ARGV[8]  the deadline (µs on the server's clock, see `late` in prelude.lua); absent = none
-- returns  { now, granted, window start (µs), remaining (units), valid_for (µs, until the
--            window ends), retry_after (µs, -1 unless refused) }, or 'late <now>' when the
--            deadline had passed: then nothing is written, the give-back included (the
--            caller sends it again with its next take, or counts it lost)
--
-- Exactness: the count never exceeds the limit (granted = min(want, limit − count)); a
-- refusal writes nothing but the give-back. Expiry: the window's end (+ slack), set with
-- every grant; a give-back alone keeps the key's TTL.
local too_late, now = start(ARGV[7] or '', ARGV[8])
if too_late then return too_late end
local limit, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, need = tonumber(ARGV[3]), tonumber(ARGV[4])
local back, back_window = tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]
local window, count = 0, 0
local v = redis.call('GET', key)
if v then
  local w, c = string.match(v, '^(%d+):(%d+)$')
  window, count = tonumber(w) or 0, tonumber(c) or 0
end
local live = 0
if window + period > now then live = count end
local current = now - now % period
local changed = false
if back > 0 and live > 0 and back_window == window then
  live = live - back
  if live < 0 then live = 0 end
  changed = true
end
local available = limit - live
if available < 0 then available = 0 end
local granted = 0
if available >= need then granted = math.min(want, available) end
local valid = current + period - now
if granted > 0 then
  live = live + granted
  redis.call('SET', key, fmt(current) .. ':' .. fmt(live), 'PX', ttl_ms(valid))
elseif changed then
  redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'KEEPTTL')
end
local retry = -1
if granted < need then retry = valid end
local remaining = limit - live
if remaining < 0 then remaining = 0 end
return { now, granted, current, remaining, valid, retry }
