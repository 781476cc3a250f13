-- sliding_window.lua: sub-bucket counters, the sliding log quantized.
-- Mirrors crates/tollgate/src/rules/sliding_window.rs exactly.
--
-- KEYS[i]  the key, a hash {<bucket index> = units}; bucket i covers [i × w, (i+1) × w) µs
-- ARGV     (per entry, see check.lua) 'sw', limit (units), w = bucket width
--          (µs, ceil(period/buckets)), buckets (count)
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`
-- returns  verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--          retry_after (µs, -1 if admitted)
--
-- A decision at now counts the current bucket and the `buckets` before it (and any later
-- one). Buckets that left the span are deleted only when admitting, so a denied call writes
-- nothing; memory stays within buckets + 1 fields. Expiry: (newest + buckets + 1) × w − now
-- (+ slack), set with every admission.
local function sliding_window(key, now, cost, limit, w, buckets, op)
  local current = math.floor(now / w)
  local oldest = current - buckets
  if oldest < 0 then oldest = 0 end
  local h = redis.call('HGETALL', key)
  local live, stale = {}, {}
  local count, newest = 0, -1
  for i = 1, #h, 2 do
    local idx = tonumber(h[i])
    local units = tonumber(h[i + 1])
    if idx > newest then newest = idx end
    if idx >= oldest then
      live[#live + 1] = idx
      count = count + units
    else
      stale[#stale + 1] = h[i]
    end
  end
  local allowed, retry = 1, -1
  if op == 2 then
    local left = redis.call('HINCRBY', key, fmt(current), -cost)
    if left <= 0 then
      redis.call('HDEL', key, fmt(current))
      count = count - cost - left
    else
      count = count - cost
    end
    if count < 0 then count = 0 end
  elseif count + cost > limit then
    -- Oldest buckets leave the span one by one: bucket i stops counting at (i + buckets + 1) × w.
    local units_of = {}
    for i = 1, #h, 2 do units_of[tonumber(h[i])] = tonumber(h[i + 1]) end
    table.sort(live)
    local must_leave = count + cost - limit
    local gone = 0
    retry = 0
    for _, idx in ipairs(live) do
      gone = gone + units_of[idx]
      if gone >= must_leave then
        retry = (idx + buckets + 1) * w - now
        if retry < 0 then retry = 0 end
        break
      end
    end
    allowed = -1
  elseif op == 1 and cost > 0 then
    -- (A cost of 0, refused before any store by the Rust side, would write a field of 0 and
    -- no expiry: an immortal key.) Before the first write: its PEXPIRE comes after it
    -- (prelude.lua).
    may_expire(key)
    if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
    redis.call('HINCRBY', key, fmt(current), cost)
    count = count + cost
    if current > newest then newest = current end
  end
  local reset = 0
  if count > 0 then
    reset = (newest + buckets + 1) * w - now
    if reset < 0 then reset = 0 end
    if op == 1 and allowed == 1 then
      redis.call('PEXPIRE', key, ttl_ms(reset))
    end
  end
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, reset, retry
end
