-- Clears a lock by its token, for an operator who knows it is stale:
-- compare-and-delete, never a blind DEL. KEYS[1] = the key, ARGV[1] = the
-- token (of a mutex or fenced lock, or of one reentrant hold: any hold of
-- any layout: keyspace.lua). The hold named by the token goes, and the
-- key with it as the key's own kind would let it go (a reentrant key when
-- its last hold does); a deleted key wakes its first waiter (queue.lua).
-- 1: cleared; 0: no key; -1: the key holds other tokens, nothing changed.
local layout, id, token = look(KEYS[1])
if layout == nil then
  return id
elseif not layout then
  return 0
end
if let_go(KEYS[1], layout, id, token, ARGV[1], true) == 0 then
  return -1
end
return 1
