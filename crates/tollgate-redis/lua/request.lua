-- request.lua: decides one request's entries all or nothing; shared by check.lua (one request
-- per call) and batch.lua (several independent requests per call), so that what a request
-- means on Redis is written once.
--
-- Runs after prelude.lua and the five algorithm functions. It knows no algorithm beyond the
-- width of its arguments and of its answer: each entry's tag names its function, and every
-- function takes the same arguments and answers with a verdict first (negative = refused).
--
-- An entry's arguments, from its tag on (the caller checked every cost: 1 ≤ cost ≤ the
-- entry's capacity, or capacity + 1 for a shadow entry, which every function refuses without
-- charging; entries may ask different costs):
--   'gcra', inc (cost × T, µs), tau (µs), whole ('1' when T is   4 arguments, answers 1 integer
--   a whole number of ms, see gcra.lua)
--   'fw' | 'sl' | 'sw' | 'tb', cost, then the algorithm's three   5 arguments, answers 4
--   integer parameters (see each algorithm file)
-- (the same values as the single-entry scripts take, so each row of src/script/port.rs writes its
-- arguments once.) A tag may start with one mark, what the request needs of the entry
-- (tollgate::Need): none = it must admit; '?' = one of the request's any-of group (the
-- request is refused only when all of the group refuses); '~' = optional (never refuses the
-- request); '+' = a fixed window entry of a request that counts refusals (charged whether
-- it admits or not, each entry on its own: every entry of such a request has it; peeked, it
-- answers from its count as it stands, refused only past the limit).
--
-- decide(k, a, n, op, now, server, reply) decides the n entries whose keys are
-- KEYS[k+1 .. k+n] and whose arguments start at ARGV[a]; op: 0 = peek (decide, write nothing),
-- 1 = check (charge every entry if all admit, else nothing; with marks: charge every entry
-- that admits if the request is admitted, else nothing), 2 = give back each entry's cost
-- charged at `now` (cross-slot undo). It appends each entry's answer to `reply` (a GCRA
-- entry's one integer, four integers for the others) and returns the index of the argument
-- after its entries.

local algorithms = { fw = fixed_window, sl = sliding_log, sw = sliding_window,
  tb = token_bucket }

local byte, sub = string.byte, string.sub
-- The marks' bytes: '?', '~', '+'.
local ONE_OF, OPTIONAL, COUNT = 63, 126, 43

-- The entry whose key is KEYS[i] and arguments start at ARGV[b], decided with `mode`;
-- appends its answer to `reply`. Returns whether it admits, where the next entry starts, and
-- its mark (nil when none).
local function run(i, b, now, server, mode, reply)
  local tag = ARGV[b]
  local mark = byte(tag, 1)
  if mark == ONE_OF or mark == OPTIONAL or mark == COUNT then
    tag = sub(tag, 2)
    -- A check of a counting entry charges whatever it answers (fixed_window.lua, op 3); a
    -- peek of one answers from the count as it stands (op 4).
    if mark == COUNT then
      if tag ~= 'fw' then error('tollgate: only a fixed window counts refusals') end
      if mode == 1 then mode = 3 elseif mode == 0 then mode = 4 end
    end
  else
    mark = nil
  end
  local j = #reply
  if tag == 'gcra' then
    local v = gcra(KEYS[i], now, 1, tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
      ARGV[b + 3] == '1', mode, server)
    reply[j + 1] = v
    return v >= 0, b + 4, mark
  end
  local algorithm = algorithms[tag]
  if not algorithm then error('tollgate: unknown algorithm tag ' .. tostring(tag)) end
  local v, x, y, z = algorithm(KEYS[i], now, tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
    tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), mode, server)
  reply[j + 1], reply[j + 2], reply[j + 3], reply[j + 4] = v, x or 0, y or 0, z or 0
  return v >= 0, b + 5, mark
end

local function decide(k, a, n, op, now, server, reply)
  local b = a
  -- One entry, no charging, or a request that counts refusals: each entry on its own.
  if n == 1 or op ~= 1 or byte(ARGV[a], 1) == COUNT then
    for i = 1, n do
      local _
      _, b = run(k + i, b, now, server, op, reply)
    end
    return b
  end
  -- Several entries: decide all first; charge only if the request is admitted (every entry
  -- without a mark admits, and one of the '?' entries if any), and then only the entries
  -- that admit (all of them, without marks).
  local base = #reply
  local must, group, one_of = true, false, false
  local admits = {}
  for i = 1, n do
    local ok, mark
    ok, b, mark = run(k + i, b, now, server, 0, reply)
    admits[i] = ok
    if mark == ONE_OF then
      group = true
      if ok then one_of = true end
    elseif not ok and mark ~= OPTIONAL then
      must = false
    end
  end
  if not must or (group and not one_of) then return b end
  -- Every key it charges may get its expiry, asked before the first write (prelude.lua): one
  -- refused after an earlier entry's write would keep that write, charged for a request its
  -- limits' policy answers (no rollback).
  for i = 1, n do
    if admits[i] then may_expire(KEYS[k + i]) end
  end
  for j = #reply, base + 1, -1 do reply[j] = nil end
  b = a
  for i = 1, n do
    local _
    if admits[i] then
      _, b = run(k + i, b, now, server, 1, reply)
    else
      _, b = run(k + i, b, now, server, 0, reply)
    end
  end
  return b
end
