-- Lets one hold go. KEYS[1] = the key, ARGV[1] = the owner id, ARGV[2] = the
-- hold's token, ARGV[3] = '1' to wake the key's first waiter when the key
-- goes (see queue.lua). The layout (layout.lua, through keyspace.lua)
-- removes this hold's field only; the key goes, and its first waiter is
-- woken, when no hold is left.
-- 1: the hold was there and is gone; 2: the same, the key deleted, but the
-- wake-up refused (an ACL); 0: the hold was not there (expired, or never
-- taken on this node); -1: the key is another holder's, of any kind.
local key, owner, token = KEYS[1], ARGV[1], ARGV[2]
local id, reply, smallest = mine(key, 'reentrant', owner)
if reply then
  return reply
end
return let_go(key, 'reentrant', id, smallest, token, ARGV[3] == '1')
