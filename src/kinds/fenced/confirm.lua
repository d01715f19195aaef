-- The second round of a fenced acquisition: raises the counter to the token
-- (never lowers it), and says whether our key is still here.
-- KEYS[1] = the key, KEYS[2] = its counter, ARGV[1] = our token,
-- ARGV[2] = the fencing token.
-- 1: our key is here, and the counter is at least the token; 0: no key;
-- -1: another holder's key (or a key that is no lock). The counter is raised in every case: a node
-- that lagged catches up. Error BADFENCE: the counter is not a whole number
-- from 0 below 2^53 (see counter.lua), nothing changed.
local raised, bad = raise_fence(KEYS[2], ARGV[2])
if not raised then
  return bad
end
local layout, id = look(KEYS[1], true)
if layout == 'exclusive' and id == ARGV[1] then
  return 1
elseif layout == false then
  return 0
end
return -1
