-- Lets our reader's share go. KEYS[1] = the key, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the key's first waiter (a writer's intent first)
-- when the last share goes (see queue.lua).
-- 1: let go; 2: the same, the key deleted, but the wake-up refused (an
-- ACL); 0: our share is not here; -1: a writer (or another kind) holds the
-- key.
local id, reply, token = mine(KEYS[1], 'readers')
if reply then
  return reply
end
return let_go(KEYS[1], 'readers', id, token, ARGV[1], ARGV[2] == '1')
