-- batch_floor.lua: a reference point of the benchmark, never used by the store. What any
-- GCRA batch on the server's clock must do per admitted decision, and nothing else: read
-- the key's state (PTTL) and write it back: move the expiry of a key that exists (PEXPIRE),
-- create one that does not (SET … PX), with constant arguments and no arithmetic.
-- lua/batch_gcra.lua does these commands per decision plus GCRA itself (for a T that is a
-- whole number of ms, as here), so no batch of such decisions can cost Redis less than this
-- per key.
--
-- KEYS     any keys; ARGV none; returns 1
for i = 1, #KEYS do
  if redis.call('PTTL', KEYS[i]) >= 0 then
    redis.call('PEXPIRE', KEYS[i], '1999')
  else
    redis.call('SET', KEYS[i], '0', 'PX', '1999')
  end
end
return 1
