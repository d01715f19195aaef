-- Compare-and-pexpire. KEYS = the lock's keys, ARGV[1] = our token,
-- ARGV[2] = TTL in milliseconds. Prolongs the keys only if every one still
-- holds our token. Never creates a key, and never shortens one: extensions
-- of one lock may reach a node out of order (one waited for a connection
-- that another overtook), and a late shorter one must not cut a key that a
-- newer extension's deadline counts on. The caller's deadline is its own
-- lower bound either way.
-- 1: every key lives at least ARGV[2] ms from now; 0: a key is missing (none
-- another holder's); -1: a key is another holder's, of any kind. Nothing is
-- changed unless 1.
local missing = false
for _, key in ipairs(KEYS) do
  local layout, id = look(key, true)
  if layout == nil then
    return id
  elseif not layout then
    missing = true
  elseif layout ~= 'exclusive' or id ~= ARGV[1] then
    return -1
  end
end
if missing then
  return 0
end
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  prolong(key, ttl, ARGV[2])
end
return 1
