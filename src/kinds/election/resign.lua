-- A leader's release (the mutex's release.lua for one key), its record
-- taken away with it and the change published (record.lua's channel).
-- KEYS[1] = the key; ARGV[1] = our token, ARGV[2] = '1' to wake the first
-- waiter (the next candidate: see queue.lua).
-- 1: our key is deleted; 2: the same, but the wake-up was refused (an
-- ACL); 0: no key; -1: another holder's, left alone.
local ours, reply = mine(KEYS[1], 'exclusive', ARGV[1])
if not ours then
  return reply
end
local done = let_go(KEYS[1], 'exclusive', ARGV[1], ARGV[1], ARGV[1], ARGV[2] == '1')
local record = KEYS[1] .. ':leader'
if redis.call('HGET', record, 't') == ARGV[1] then
  redis.call('DEL', record)
  redis.pcall('PUBLISH', record, 'resigned')
end
return done
