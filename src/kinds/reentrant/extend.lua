-- Prolongs the key for one hold. KEYS[1] = the key, ARGV[1] = the owner id,
-- ARGV[2] = the hold's token, ARGV[3] = TTL in milliseconds. Only while the
-- hold is there; never creates it, never shortens the key (other holds, and
-- a newer extension of this one, may count on a longer life).
-- 1: the key lives at least ARGV[3] ms from now; 0: the hold is not there;
-- -1: the key is another holder's, of any kind.
local key, owner, token, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local _, reply = mine(key, 'reentrant', owner)
if reply then
  return reply
end
if redis.call('HEXISTS', key, token) == 0 then
  return 0
end
prolong(key, ttl, ARGV[3])
return 1
