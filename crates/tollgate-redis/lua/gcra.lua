-- gcra.lua: the generic cell rate algorithm, one integer per key.
-- Mirrors crates/tollgate/src/rules/gcra.rs exactly.
--
-- KEYS[i]  the key, a string: the theoretical arrival time `tat` (µs since the epoch)
-- ARGV     (per entry, see check.lua) 'gcra', T = emission interval (µs, ceil(period/limit)),
--          tau = T × burst (µs), unused
-- op       0 = decide only, 1 = decide and charge when admitted, 2 = give back `cost`
--          charged at this same `now`
-- returns  allowed (1/0), remaining (units), reset_after (µs), retry_after (µs, -1 if allowed)
--
-- Expiry: `tat` − now (+ slack), set with every write; denied calls write nothing.
local function gcra(key, now, cost, t, tau, _, op)
  local tat = tonumber(redis.call('GET', key) or '0') or 0
  local allowed, retry = 1, -1
  if op == 2 then
    tat = tat - cost * t
    if tat <= now then
      redis.call('DEL', key)
      tat = 0
    else
      redis.call('SET', key, fmt(tat), 'KEEPTTL')
    end
  else
    local base = tat
    if now > base then base = now end
    local new_tat = base + cost * t
    if new_tat - now <= tau then
      if op == 1 then
        tat = new_tat
        redis.call('SET', key, fmt(tat), 'PX', ttl_ms(tat - now))
      end
    else
      allowed, retry = 0, new_tat - tau - now
    end
  end
  local used = tat - now
  if used < 0 then used = 0 end
  local left = tau - used
  if left < 0 then left = 0 end
  return allowed, math.floor(left / t), used, retry
end
