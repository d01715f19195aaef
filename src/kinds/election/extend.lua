-- A leader's renewal: compare-and-pexpire of its key (as the mutex's
-- extend.lua: never creates, never shortens), and its record brought up to
-- date where it is not (a node that missed the announcement, or a newer
-- proclamation: record.lua).
-- KEYS[1] = the key; ARGV[1] = our token, ARGV[2] = TTL in milliseconds,
-- ARGV[3] = our identity, ARGV[4] = our value, ARGV[5] = our term,
-- ARGV[6] = the value's proclamation number.
-- 1: our key lives at least ARGV[2] ms from now, and the record is ours;
-- 0: the key is missing; -1: another holder's. Nothing changed unless 1.
local ours, reply = mine(KEYS[1], 'exclusive', ARGV[1])
if not ours then
  return reply
end
prolong(KEYS[1], tonumber(ARGV[2]), ARGV[2])
write_record(KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
keep_record(KEYS[1])
return 1
