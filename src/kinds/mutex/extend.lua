-- Compare-and-pexpire. KEYS[1] = key, ARGV[1] = our token, ARGV[2] = TTL in
-- milliseconds. Never creates the key, and never shortens it: extensions of
-- one lock may reach a node out of order (one waited for a connection that
-- another overtook), and a late shorter one must not cut a key that a newer
-- extension's deadline counts on. The caller's deadline is its own lower
-- bound either way.
-- 1: the key lives at least ARGV[2] ms from now; 0: no key; -1: another
-- owner's key, left alone.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  local left = redis.call('PTTL', KEYS[1])
  -- -1: no expiry (someone ran PERSIST): give it one, not eternity.
  if left == -1 or left < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
elseif v then
  return -1
end
return 0
