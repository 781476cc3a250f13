-- token_bucket.lua: whole tokens refilled one per emission interval, up to `burst`.
-- Mirrors crates/tollgate/src/rules/token_bucket.rs exactly.
--
-- KEYS[i]  the key, a hash {tokens = whole tokens, negative while owed (pace.lua), last =
--          µs when that count was reached}; no key = a full bucket
-- ARGV     (per entry, see check.lua) 'tb', burst (units), T = emission interval
--          (µs, ceil(period/limit)), unused
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`
-- returns  verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--          retry_after (µs, -1 if admitted)
--
-- Only whole intervals are added to `last`, so progress towards the next token is never
-- lost. Expiry: time to a full bucket (+ slack), set with every write; denied calls write
-- nothing.
local function token_bucket(key, now, cost, burst, t, _, op)
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
  if op == 2 then
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
