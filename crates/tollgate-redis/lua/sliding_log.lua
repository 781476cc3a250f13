-- sliding_log.lua: the time of every admitted unit, exact on every interval.
-- Mirrors crates/tollgate/src/rules/sliding_log.rs exactly.
--
-- KEYS[i]  the key, a ZSET: one member per admitted unit, score = admission time (µs),
--          member "<time µs>:<n>" where n numbers the units admitted at that same time
--          (unique: members of one score are only ever added together and trimmed together)
-- ARGV     (per entry, see check.lua) 'sl', limit (units), period (µs), unused
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`
-- returns  verdict (1 admitted, -1 refused), remaining (units), reset_after (µs),
--          retry_after (µs, -1 if admitted)
--
-- A unit admitted at t counts while t + period > now. Counting is ZCOUNT, so a denied call
-- writes nothing; old members are trimmed only when admitting. Expiry: newest + period − now
-- (+ slack), set with every admission.
local function sliding_log(key, now, cost, limit, period, _, op)
  local from = '(' .. fmt(now - period)
  local count = redis.call('ZCOUNT', key, from, '+inf')
  local allowed, retry = 1, -1
  if op == 2 then
    -- Remove the highest-numbered members of this instant, keeping numbers 0..n-1 dense.
    local n = redis.call('ZCOUNT', key, fmt(now), fmt(now))
    local take = cost
    if take > n then take = n end
    local stamp = fmt(now)
    local first = n - take
    while first < n do
      -- In batches: unpack() of thousands of values would overflow Lua's C stack.
      local last = math.min(first + 999, n - 1)
      local mine = {}
      for i = first, last do mine[#mine + 1] = stamp .. ':' .. fmt(i) end
      count = count - redis.call('ZREM', key, unpack(mine))
      first = last + 1
    end
  elseif count + cost > limit then
    -- The oldest (count + cost − limit) live units must expire first.
    local at = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT',
      count + cost - limit - 1, 1)
    retry = 0
    if at[2] then
      retry = tonumber(at[2]) + period - now
      if retry < 0 then retry = 0 end
    end
    allowed = -1
  elseif op == 1 then
    -- Before the first write: its PEXPIRE comes after it (prelude.lua).
    may_expire(key)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
    local n0 = redis.call('ZCOUNT', key, fmt(now), fmt(now))
    local stamp = fmt(now)
    local i = 0
    while i < cost do
      -- In batches: unpack() of thousands of values would overflow Lua's C stack.
      local last = math.min(i + 499, cost - 1)
      local args = {}
      for j = i, last do
        args[#args + 1] = stamp
        args[#args + 1] = stamp .. ':' .. fmt(n0 + j)
      end
      redis.call('ZADD', key, unpack(args))
      i = last + 1
    end
    count = count + cost
  end
  local reset = 0
  if count > 0 then
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(newest[2]) + period - now
    if reset < 0 then reset = 0 end
    if op == 1 and allowed == 1 then
      redis.call('PEXPIRE', key, ttl_ms(reset))
    end
  end
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, reset, retry
end
