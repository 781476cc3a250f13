-- floor.lua: a reference point of the benchmark, never used by the store. The three
-- commands a GCRA that reads `TIME` needs (TIME, GET, SET with an expiry) with constant
-- arguments and no arithmetic: no such script can cost Redis less. tollgate's GCRA reads its
-- key's expiry instead of `TIME` (lua/gcra.lua), which is how it gets below this.
--
-- KEYS[1]  any key; ARGV none; returns 1
redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1796219468598133', 'PX', '2000')
return 1
