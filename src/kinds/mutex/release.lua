-- Compare-and-delete. KEYS = the lock's keys, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the first waiter of each key released (see
-- queue.lua). Deletes every key that holds our token, and only those.
-- 1: every key was ours and is deleted; 2: the same, but a PUBLISH was
-- refused (an ACL); 0: some key was missing (none another owner's);
-- -1: some key is another owner's (a string or a reentrant hash), left alone.
local missing, held, refused = false, false, false
for _, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  -- A reentrant lock's hash is another owner's; any other type is not a
  -- lock: the node's WRONGTYPE error.
  if type(v) == 'table' and redis.call('TYPE', key).ok ~= 'hash' then
    return v
  end
  if v == ARGV[1] then
    redis.call('DEL', key)
    if ARGV[2] == '1' then
      if not wake(key, ARGV[1]) then
        refused = true
      end
    end
  elseif v then
    held = true
  else
    missing = true
  end
end
if held then
  return -1
elseif missing then
  return 0
elseif refused then
  return 2
end
return 1
