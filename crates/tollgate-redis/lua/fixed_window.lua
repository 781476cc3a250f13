-- fixed_window.lua: one counter per key for the current clock-aligned window.
-- Mirrors crates/tollgate/src/rules/fixed_window.rs exactly.
--
-- KEYS[i]  the key, a string "<window start µs>:<units admitted in it>"
-- ARGV     (per entry, see check.lua) 'fw', limit (units), period (µs), unused
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`, 3 = count (charge `cost` whether it fits or not, and
--          decide from the count after: refused when it is above the limit, as
--          envoyproxy/ratelimit counts; mirrors FixedWindow::count), 4 = the count as it
--          stands (decide, write nothing: refused only when the count is above the limit, as
--          envoyproxy/ratelimit answers `hits_addend` 0; FixedWindow::count of 0 on a copy)
-- returns  verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--          retry_after (µs, -1 if admitted)
--
-- Expiry: the window's end (+ slack), written with the counter by the call that opens the
-- window and by every later admitted unit of it as the same deadline, so traffic never
-- extends it and a key without TTL is repaired by the next admitted call. Denied calls write
-- nothing (but a count, op 3, which charges refusals too).
local function fixed_window(key, now, cost, limit, period, _, op)
  local window, count = 0, 0
  local v = redis.call('GET', key)
  if v then
    local w, c = string.match(v, '^(%d+):(%d+)$')
    window, count = tonumber(w) or 0, tonumber(c) or 0
  end
  local live = 0
  if window + period > now then live = count end
  if op == 3 then
    if live == 0 then
      window = now - now % period
    end
    live = live + cost
    redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'PX', ttl_ms(window + period - now))
    local reset = window + period - now
    local remaining = limit - live
    if remaining < 0 then remaining = 0 end
    if live > limit then return -1, remaining, reset, reset end
    return 1, remaining, reset, -1
  elseif op == 4 then
    local reset = 0
    if live > 0 then reset = window + period - now end
    local remaining = limit - live
    if remaining < 0 then remaining = 0 end
    if live > limit then return -1, remaining, reset, reset end
    return 1, remaining, reset, -1
  elseif op == 2 then
    -- Only from the window the undone charge was counted in (the window of `now`, its
    -- instant): a give-back that arrives after the window changed takes nothing from the new
    -- one, whose count never held that charge.
    if live > 0 and window == now - now % period then
      live = live - cost
      if live < 0 then live = 0 end
      redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'KEEPTTL')
    end
  elseif live + cost > limit then
    local retry = window + period - now
    if retry < 0 then retry = 0 end
    local reset = 0
    if live > 0 then reset = window + period - now end
    local remaining = limit - live
    if remaining < 0 then remaining = 0 end
    return -1, remaining, reset, retry
  elseif op == 1 then
    if live == 0 then
      window = now - now % period
    end
    live = live + cost
    redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'PX', ttl_ms(window + period - now))
  end
  local reset = 0
  if live > 0 then reset = window + period - now end
  local remaining = limit - live
  if remaining < 0 then remaining = 0 end
  return 1, remaining, reset, -1
end
