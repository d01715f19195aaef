-- Takes one hold for an owner. KEYS[1] = the key, ARGV[1] = the owner id,
-- ARGV[2] = this hold's token, ARGV[3] = TTL in milliseconds, ARGV[4] = the
-- waiter ('' for none): it is told who holds the key when it is another
-- holder's, and queues for it (see queue.lua). The layout: layout.lua.
-- 1: the hold is taken (also when run twice), and the key lives at least the
-- TTL; 0: another holder's key, of any kind, nothing changed; {holder, pttl}:
-- the same, with the name waiters are told of the holder (its token;
-- `holds:<smallest hold>` for a reentrant owner; false if unknown) and the
-- key's PTTL.
local key, owner, token, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local layout, id, smallest = look(key)
if layout == nil then
  return id
elseif not layout then
  redis.call('HSET', key, 'o', owner, 'i', token, token, '1')
  redis.call('PEXPIRE', key, ARGV[3])
elseif layout == 'reentrant' and id == owner then
  redis.call('HSET', key, token, '1')
  if not smallest or token < smallest then
    redis.call('HSET', key, 'i', token)
  end
  -- Refreshed, never shortened: another hold may count on a longer life.
  prolong(key, ttl, ARGV[3])
else
  return refuse(key, ARGV[4], layout, id, smallest)
end
if ARGV[4] ~= '' then
  dequeue(key, ARGV[4])
end
return 1
