-- The second round of a campaign (the fenced kind's confirm.lua, plus the
-- record): raises the counter to the term (never lowers it) and, where our
-- key is still here, writes who leads (record.lua).
-- KEYS[1] = the key, KEYS[2] = its counter (the record is beside the key);
-- ARGV[1] = our token, ARGV[2] = the term, ARGV[3] = our identity,
-- ARGV[4] = our value, ARGV[5] = its proclamation's number.
-- 1: our key is here, the counter is at least the term, and the record is
-- ours; 0: no key; -1: another holder's key (or a key that is no lock).
-- Error BADFENCE: the counter is not one (counter.lua), nothing changed.
local raised, bad = raise_fence(KEYS[2], ARGV[2])
if not raised then
  return bad
end
local layout, id = look(KEYS[1], true)
if layout == 'exclusive' and id == ARGV[1] then
  write_record(KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[2], ARGV[5])
  keep_record(KEYS[1])
  return 1
elseif layout == false then
  return 0
end
return -1
