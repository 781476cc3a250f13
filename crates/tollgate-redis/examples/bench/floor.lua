-- floor.lua: the benchmark's lower bound, never used by the store. The three commands a
-- server-time GCRA needs (TIME, GET, SET with an expiry) with constant arguments and no
-- arithmetic: no GCRA script can cost Redis less.
--
-- KEYS[1]  any key; ARGV none; returns 1
redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1796219468598133', 'PX', '2000')
return 1
