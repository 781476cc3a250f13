-- token_bucket.lua: whole tokens refilled one per emission interval, up to `burst`.
-- Mirrors crates/tollgate/src/rules/token_bucket.rs exactly.
--
-- KEYS[i]  the key, a hash {tokens = whole tokens, negative while owed (pace.lua), last =
--          µs when that count was reached}; no key = a full bucket
-- ARGV     (per entry, see check.lua) 'tb', burst (units), T = emission interval
--          (µs, ceil(period/limit)), unused
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`; on the server's clock `now` is then the charge's
--          instant (or an earlier one), the state is read at the server's time, and only what
--          it may still hold of the charge goes back: cost × T less the time since (as
--          gcra.lua's `at`), in µs, not rounded to whole tokens (`last` keeps the part).
--          A bucket that refilled and was charged again since keeps the new charge (a late
--          give-back of an unanswered check used to return it: two admitted of a burst of 1)
-- returns  verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--          retry_after (µs, -1 if admitted)
--
-- Only whole intervals are added to `last`, so progress towards the next token is never
-- lost. Expiry: time to a full bucket (+ slack), set with every write; denied calls write
-- nothing.
local function token_bucket(key, now, cost, burst, t, _, op, server)
  local at
  if op == 2 and server then
    at = now
    local c = redis.call('TIME')
    now = c[1] * 1000000 + c[2]
  end
  local st = redis.call('HMGET', key, 'tokens', 'last')
  local tokens, last = burst, now
  if st[1] and st[2] then
    tokens, last = tonumber(st[1]), tonumber(st[2])
    if now > last then
      local earned = math.floor((now - last) / t)
      if tokens + earned >= burst then
        tokens, last = burst, now
      else
        tokens, last = tokens + earned, last + earned * t
      end
    end
  end
  local allowed, retry = 1, -1
  if op == 2 and at then
    -- tat = last + (burst − tokens) × T, moved back by what may still be held; written back
    -- as whole tokens and a `last` within the interval before now, which is exact.
    local back = at + cost * t - now
    if back > cost * t then back = cost * t end
    if back > 0 then
      local tat = last + (burst - tokens) * t - back
      if tat <= now then
        redis.call('DEL', key)
        tokens, last = burst, now
      else
        local owed = math.floor((tat - now + t - 1) / t)
        tokens, last = burst - owed, tat - owed * t
        redis.call('HSET', key, 'tokens', fmt(tokens), 'last', fmt(last))
      end
    end
  elseif op == 2 then
    tokens = tokens + cost
    if tokens >= burst then
      redis.call('DEL', key)
      tokens, last = burst, now
    else
      redis.call('HSET', key, 'tokens', fmt(tokens), 'last', fmt(last))
    end
  elseif tokens >= cost then
    if op == 1 then
      tokens = tokens - cost
      may_expire(key)
      redis.call('HSET', key, 'tokens', fmt(tokens), 'last', fmt(last))
      redis.call('PEXPIRE', key, ttl_ms((burst - tokens) * t + last - now))
    end
  else
    allowed, retry = -1, (cost - tokens) * t + last - now
  end
  local reset = 0
  if tokens < burst then
    reset = (burst - tokens) * t + last - now
    if reset < 0 then reset = 0 end
  end
  -- Below zero while reservations or settlements owe tokens (pace.lua): none remain.
  local remaining = tokens
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, reset, retry
end
