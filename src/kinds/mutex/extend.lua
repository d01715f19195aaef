-- Compare-and-pexpire. KEYS = the lock's keys, ARGV[1] = our token,
-- ARGV[2] = TTL in milliseconds. Prolongs the keys only if every one still
-- holds our token. Never creates a key, and never shortens one: extensions
-- of one lock may reach a node out of order (one waited for a connection
-- that another overtook), and a late shorter one must not cut a key that a
-- newer extension's deadline counts on. The caller's deadline is its own
-- lower bound either way.
-- 1: every key lives at least ARGV[2] ms from now; 0: a key is missing (none
-- another owner's); -1: a key is another owner's (a string or a reentrant hash). Nothing is
-- changed unless 1.
local missing = false
for _, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  -- A reentrant lock's hash is another owner's; any other type is not a
  -- lock: the node's WRONGTYPE error.
  if type(v) == 'table' and redis.call('TYPE', key).ok ~= 'hash' then
    return v
  end
  if v ~= ARGV[1] then
    if v then
      return -1
    end
    missing = true
  end
end
if missing then
  return 0
end
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  local left = redis.call('PTTL', key)
  -- -1: no expiry (someone ran PERSIST): give it one, not eternity.
  if left == -1 or left < ttl then
    redis.call('PEXPIRE', key, ARGV[2])
  end
end
return 1
