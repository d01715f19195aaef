-- Lets our permit go on this node. KEYS[1] = the key, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the key's first waiter (see queue.lua): any permit
-- let go is one a waiter can take. Every slot our token has here goes
-- (layout.lua, through keyspace.lua's `remove`); the key goes with its
-- last held slot.
-- 1: let go; 2: the same, but the wake-up was refused (an ACL); 0: our
-- token has no slot here; -1: the key is another kind's holder's.
local id, reply, token = mine(KEYS[1], 'semaphore')
if reply then
  return reply
end
return let_go(KEYS[1], 'semaphore', id, token, ARGV[1], ARGV[2] == '1')
