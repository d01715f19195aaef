-- Lets our permit go on this node. KEYS[1] = the key, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the key's first waiter (see queue.lua): any permit
-- let go is one a waiter can take. Every slot our token has here goes
-- (keyspace.lua's `remove`); the key goes with its last held slot.
-- 1: let go; 2: the same, but the wake-up was refused (an ACL); 0: our
-- token has no slot here; -1: the key is another kind's holder's.
local layout, id, token = look(KEYS[1])
if layout == nil then
  return id
elseif not layout then
  return 0
elseif layout ~= 'semaphore' then
  return -1
end
return let_go(KEYS[1], layout, id, token, ARGV[1], ARGV[2] == '1')
