-- Compare-and-pexpire. KEYS[1] = key, ARGV[1] = our token, ARGV[2] = TTL in
-- milliseconds. Never creates the key.
-- 1: prolonged; 0: no key; -1: another owner's key, left alone.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v then
  return -1
end
return 0
