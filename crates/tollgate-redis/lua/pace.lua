-- pace.lua: the pacing calls on one key — a reservation of the key's next slot, its
-- cancellation, and a settlement (charge or refund). Mirrors tollgate::rules::Schedule and
-- each rule's `adjust`/`refund` (crates/tollgate/src/rules/) exactly.
--
-- Runs after prelude.lua, the five algorithm functions and request.lua (src/script/port.rs
-- composes it like check.lua), and reads and writes each algorithm's state in that
-- algorithm's own format, so checks and pacing calls of one key see the same units. The
-- algorithm functions answer the state after the call (a peek of one unit).
--
-- KEYS[1]  the key
-- ARGV[1]  the op: 'r' reserve, 'c' cancel, 'a' adjust
-- ARGV[2]  the algorithm's tag: 'gcra', 'tb' (reserve, cancel, adjust), 'fw', 'sl', 'sw'
--          (adjust only)
-- ARGV[3]  units: the cost (reserve, cancel) or the signed delta (adjust)
-- ARGV[4]  reserve: the longest wait accepted (µs): what is left of the caller's max_wait
--          when this try was sent, -1 when nothing is (refused whatever the slot); cancel: the
--          reservation's ticket (the key's tat after it, µs); adjust: unused
-- ARGV[5..7] the algorithm's three parameters (gcra: T, tau, whole; the others as in
--          check.lua)
-- ARGV[8]  the clock: '' = the server's, '<µs>' = the caller's (prelude.lua)
-- ARGV[9]  the deadline (µs on the server's clock, see `late` in prelude.lua); absent = none
-- returns  { now, verdict (1 done, -1 a reservation refused), remaining (units), reset_after
--            (µs), retry (µs until the same reservation is taken, -1 unless refused), wait
--            (µs until the slot, -1 unless reserved), ticket (µs, 0 unless reserved),
--            given back (1 when a cancellation gave its units back, else 0) }, or
--            'late <now>' (nothing written)
--
-- GCRA on the server's clock keeps tat in the key's expiry as gcra.lua does ((expiry ms −
-- 999) × 1000 − value); here it is read and written as an absolute instant (SET … PXAT, and
-- PTTL plus the ms it counts from, see `expiry_at`), which equals gcra.lua's reading from
-- PTTL. When T is a whole number of ms (`whole`), gcra.lua never reads the value, so a tat
-- written here is rounded up to the ms (value 0): the key reads at most 1 ms more spent,
-- never less. Every write sets an expiry; a state back to full is deleted; a refused
-- reservation writes nothing.
--
-- Commands: only those of src/permissions.rs's COMMANDS (the documented ACL), and none newer
-- than Redis 6.2 (so no PEXPIRETIME, Redis 7.0).
local too_late, now, server = start(ARGV[8] or '', ARGV[9])
if too_late then return too_late end
local key, op, tag = KEYS[1], ARGV[1], ARGV[2]
local units, arg = tonumber(ARGV[3]), tonumber(ARGV[4])
local p1, p2, p3 = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local verdict, retry, wait, ticket, given = 1, -1, -1, 0, 0

-- The key's expiry as an absolute instant, in ms on Redis's clock (what PEXPIRETIME answers
-- on Redis 7), or -1 when the key has none or is absent. PTTL counts from the ms Redis reads
-- for it, which must be known exactly (a ticket is compared with the state it was read from):
-- Redis 7.2 and later count from the ms its TIME answers all through a script (both are read
-- once, when the call starts); 6.2 and 7.0 read the real clock at each command, so that ms is
-- between the ms of a TIME before the PTTL and a TIME after it. `now` is the first (start()
-- read it just now); when the second's ms differs (a ms ended in between: taking `now`'s ms
-- instead missed cancellations within tens of calls, tests/it/pace_state.rs), PTTL is asked
-- again, bracketed by the second TIME and a third. After a few tries (only a Redis stalled
-- mid-script) the latest bound is taken: the key then reads as spent later than it is,
-- never earlier.
local function expiry_at()
  local before = math.floor(now / 1000)
  local ttl, after
  for _ = 1, 4 do
    ttl = redis.call('PTTL', key)
    if ttl < 0 then return -1 end
    local t = redis.call('TIME')
    after = math.floor((t[1] * 1000000 + t[2]) / 1000)
    if after == before then break end
    before = after
  end
  return after + ttl
end

-- GCRA: the key's tat (0 when full or absent) and writing one.
local function gcra_read()
  if not server then return tonumber(redis.call('GET', key)) or 0 end
  local at = expiry_at()
  if at < 0 then return 0 end
  local below = 0
  if p3 ~= 1 then
    below = tonumber(redis.call('GET', key)) or 0
    if below < 0 or below > 999 then below = 0 end
  end
  return (at - 999) * 1000 - below
end
local function gcra_write(tat)
  if tat <= now then
    redis.call('DEL', key)
    return tat
  end
  if not server then
    redis.call('SET', key, fmt(tat), 'PX', fmt(math.floor((tat - now + 999) / 1000) + 1000))
    return tat
  end
  local ms = math.floor((tat + 999) / 1000)
  if p3 == 1 then tat = ms * 1000 end
  redis.call('SET', key, fmt(ms * 1000 - tat), 'PXAT', fmt(ms + 999))
  return tat
end

-- Token bucket: tokens (negative while owed) and the instant they were counted at, refilled
-- to now as token_bucket.lua does; when the bucket is full again (tat); writing them.
local function tb_read(burst, t)
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
  return tokens, last
end
local function tb_tat(tokens, last, burst, t)
  local tat = last
  if tokens < burst then tat = last + (burst - tokens) * t end
  if tat < now then tat = now end
  return tat
end
local function tb_write(tokens, last, burst, t)
  if tokens >= burst then
    redis.call('DEL', key)
    return
  end
  may_expire(key)
  redis.call('HSET', key, 'tokens', fmt(tokens), 'last', fmt(last))
  redis.call('PEXPIRE', key, ttl_ms(tb_tat(tokens, last, burst, t) - now))
end

-- rules::DEBT_HORIZON_US: how deep a queue of reservations a settlement's debt is capped
-- beyond (an hour, the service's longest acquire), in whole emission intervals: ⌈H / t⌉
-- (exact in doubles: H and t are integers far below 2^53).
local DEBT_HORIZON = 3600000000
local function horizon_units(t)
  return math.floor((DEBT_HORIZON + t - 1) / t)
end

if tag == 'gcra' then
  local t, tau = p1, p2
  local tat = gcra_read()
  local from = tat
  if from < now then from = now end
  if op == 'r' then
    local new = from + units * t
    local w = new - tau - now
    if w < 0 then w = 0 end
    if w > arg then
      verdict, retry = -1, w - arg
    else
      -- The slot begins at new − tau, within the wait accepted; a tat rounded up to the ms
      -- (gcra_write) makes the key read up to 1 ms more spent for later callers, never this
      -- caller's slot later than it is (with max_wait 0 it answered a wait of 844 µs).
      tat = gcra_write(new)
      wait = w
      ticket = tat
    end
  elseif op == 'c' then
    if from == arg then
      local new = from - units * t
      if new < now then new = now end
      tat = gcra_write(new)
      given = 1
    end
  elseif units > 0 then
    -- At most one full capacity owed beyond empty, beyond room for a queue of reservations
    -- DEBT_HORIZON deep: tat − now ≤ 2 × tau + h × t (Gcra::debit); the excess is forgiven.
    -- A tat already further (reservations) is kept.
    local new, cap = from + units * t, now + 2 * tau + horizon_units(t) * t
    if new > cap then
      new = cap
      if from > cap then new = from end
    end
    tat = gcra_write(new)
  elseif units < 0 and tat > now then
    local new = tat + units * t
    if new < now then new = now end
    tat = gcra_write(new)
  end
  local used = tat - now
  if used < 0 then used = 0 end
  local remaining = 0
  if tau > used then remaining = math.floor((tau - used) / t) end
  return { now, verdict, remaining, used, retry, wait, ticket, given }
end

if tag == 'tb' then
  local burst, t = p1, p2
  local tokens, last = tb_read(burst, t)
  if op == 'r' then
    local w = 0
    if tokens < units then w = (units - tokens) * t + last - now end
    if w > arg then
      verdict, retry = -1, w - arg
    else
      tokens = tokens - units
      tb_write(tokens, last, burst, t)
      wait, ticket = w, tb_tat(tokens, last, burst, t)
    end
  elseif op == 'c' then
    if tb_tat(tokens, last, burst, t) == arg then
      tokens = tokens + units
      if tokens > burst then tokens = burst end
      tb_write(tokens, last, burst, t)
      given = 1
    end
  elseif units > 0 then
    -- At most burst + h tokens owed (TokenBucket::debit): past that, -burst - h counted at
    -- now (GCRA's tat = now + 2 × burst × T + h × T); a bucket owing more already
    -- (reservations) is kept.
    local h = horizon_units(t)
    local cap = now + (2 * burst + h) * t
    if last + (burst - tokens + units) * t <= cap then
      tokens = tokens - units
    elseif last + (burst - tokens) * t < cap then
      tokens, last = -burst - h, now
    end
    tb_write(tokens, last, burst, t)
  elseif units < 0 then
    tokens = tokens - units
    if tokens > burst then tokens = burst end
    tb_write(tokens, last, burst, t)
  end
  local _, remaining, reset = token_bucket(key, now, 1, burst, t, 0, 0)
  return { now, verdict, remaining, reset, retry, wait, ticket, given }
end

if op ~= 'a' then error('tollgate: only gcra and token_bucket hand out slots') end

if tag == 'fw' then
  local limit, period = p1, p2
  local window, count = 0, 0
  local v = redis.call('GET', key)
  if v then
    local w, c = string.match(v, '^(%d+):(%d+)$')
    window, count = tonumber(w) or 0, tonumber(c) or 0
  end
  local live = 0
  if window + period > now then live = count end
  if units > 0 then
    if live == 0 then window = now - now % period end
    live = live + units
    redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'PX', ttl_ms(window + period - now))
  elseif units < 0 and live > 0 then
    live = live + units
    if live < 0 then live = 0 end
    redis.call('SET', key, fmt(window) .. ':' .. fmt(live), 'KEEPTTL')
  end
  local _, remaining, reset = fixed_window(key, now, 1, limit, period, 0, 0)
  return { now, 1, remaining, reset, -1, -1, 0, 0 }
end

if tag == 'sl' then
  local limit, period = p1, p2
  if units > 0 then
    -- As sliding_log.lua's charge, whatever the count, up to 2 × limit live members
    -- (SlidingLog::debit; the excess is forgiven): members "<now>:<n>", numbered on.
    may_expire(key)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
    local add = 2 * limit - redis.call('ZCOUNT', key, '-inf', '+inf')
    if add > units then add = units end
    local n0 = redis.call('ZCOUNT', key, fmt(now), fmt(now))
    local stamp = fmt(now)
    local i = 0
    while i < add do
      local last = math.min(i + 499, add - 1)
      local args = {}
      for j = i, last do
        args[#args + 1] = stamp
        args[#args + 1] = stamp .. ':' .. fmt(n0 + j)
      end
      redis.call('ZADD', key, unpack(args))
      i = last + 1
    end
  elseif units < 0 then
    -- The newest live members first; at each instant the highest-numbered, so that the
    -- numbers of an instant stay 0..n-1 (the next charge at it numbers on from n).
    local left = -units
    while left > 0 do
      local top = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(' .. fmt(now - period),
        'WITHSCORES', 'LIMIT', 0, 1)
      if not top[2] then break end
      local stamp = top[2]
      local n = redis.call('ZCOUNT', key, stamp, stamp)
      local take = math.min(left, n)
      local mine = {}
      for k = n - take, n - 1 do mine[#mine + 1] = stamp .. ':' .. fmt(k) end
      local removed = redis.call('ZREM', key, unpack(mine))
      if removed == 0 then break end
      left = left - removed
    end
  end
  local _, remaining, reset = sliding_log(key, now, 1, limit, period, 0, 0)
  if units > 0 then redis.call('PEXPIRE', key, ttl_ms(reset)) end
  return { now, 1, remaining, reset, -1, -1, 0, 0 }
end

if tag == 'sw' then
  local limit, w, buckets = p1, p2, p3
  -- Both writes first drop the buckets that left the span (older than the current one and
  -- the `buckets` before it), as sliding_window.lua's admission does: while the key stays
  -- over its limit its checks are refused and write nothing, and without this each charge
  -- settled in a later bucket would add a field for good. The hash stays within buckets + 1
  -- fields.
  local live = {}
  if units ~= 0 then
    local oldest = math.floor(now / w) - buckets
    local h = redis.call('HGETALL', key)
    local stale = {}
    for i = 1, #h, 2 do
      local idx = tonumber(h[i])
      if idx >= oldest then
        live[#live + 1] = { idx, tonumber(h[i + 1]) }
      else
        stale[#stale + 1] = h[i]
      end
    end
    if units > 0 then may_expire(key) end
    if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  end
  if units > 0 then
    redis.call('HINCRBY', key, fmt(math.floor(now / w)), units)
  elseif units < 0 then
    -- Newest buckets first, down to the oldest still counted.
    table.sort(live, function(a, b) return a[1] > b[1] end)
    local left = -units
    for _, b in ipairs(live) do
      if left == 0 then break end
      local take = math.min(left, b[2])
      left = left - take
      if take == b[2] then
        redis.call('HDEL', key, fmt(b[1]))
      else
        redis.call('HINCRBY', key, fmt(b[1]), -take)
      end
    end
  end
  local _, remaining, reset = sliding_window(key, now, 1, limit, w, buckets, 0)
  if units > 0 then redis.call('PEXPIRE', key, ttl_ms(reset)) end
  return { now, 1, remaining, reset, -1, -1, 0, 0 }
end

error('tollgate: unknown algorithm tag ' .. tostring(tag))
