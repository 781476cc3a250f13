-- permissions.lua: which commands tollgate sends that the current Redis user may not run.
-- Run once when a store connects (src/permissions.rs), so that a user missing a permission
-- is named at start-up, not discovered by the first request that needs the command.
--
-- KEYS[1]  a key under tollgate's prefix (ACL key patterns are checked against it)
-- ARGV[1]  the prefix's reset channel (ACL channel patterns are checked against it)
-- ARGV[2..] one command line each, words separated by spaces; the word K stands for KEYS[1]
--          and C for ARGV[1]
-- Returns  two lists: the command lines the user may not run, in order (empty: every one
--          allowed), and those Redis could not check (redis.acl_check_cmd raised an error:
--          a command this server does not know, or a server whose ACL check is not Redis's).
--          Writes nothing: redis.acl_check_cmd (Redis 7) only asks the ACL. Before Redis 7
--          there is no such function, and the script answers -1 (not checked).
if redis.acl_check_cmd == nil then
  return -1
end
local refused, unchecked = {}, {}
for i = 2, #ARGV do
  local words = {}
  for word in string.gmatch(ARGV[i], '%S+') do
    if word == 'K' then
      word = KEYS[1]
    elseif word == 'C' then
      word = ARGV[1]
    end
    words[#words + 1] = word
  end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if not ok then
    unchecked[#unchecked + 1] = ARGV[i]
  elseif not allowed then
    refused[#refused + 1] = ARGV[i]
  end
end
return {refused, unchecked}
