-- batch_floor.lua: a reference point of the benchmark, never used by the store. What any
-- GCRA batch on the server's clock must do per admitted decision, and nothing else: read
-- the key's state (PTTL) and write it back with an expiry (SET … PX), with constant
-- arguments and no arithmetic. lua/batch_gcra.lua does these two commands per decision plus
-- GCRA itself, so no batch of such decisions can cost Redis less than this per key.
--
-- KEYS     any keys; ARGV none; returns 1
for i = 1, #KEYS do
  redis.call('PTTL', KEYS[i])
  redis.call('SET', KEYS[i], '0', 'PX', '1999')
end
return 1
