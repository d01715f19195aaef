-- Prolongs our permit on this node. KEYS[1] = the key, ARGV[1] = our
-- token, ARGV[2] = TTL in milliseconds, ARGV[3] = our slot. Only while the
-- slot holds our token; never creates it, never shortens it. Other slots
-- our token has here (an acquisition whose nodes granted different slots
-- leaves them: see the module doc) are let go.
-- 1: the slot lives at least ARGV[2] ms from now; 0: it is not ours here;
-- -1: the key is another kind's holder's.
local key, token, ttl, slot = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local layout, id = look(key)
if layout == nil then
  return id
elseif not layout then
  return 0
elseif layout ~= 'semaphore' then
  return -1
end
local k = tonumber(id)
local slots, now = semaphore_slots(key, k)
if not slots[slot] or slots[slot].token ~= token then
  return 0
end
for i = 0, k - 1 do
  if i ~= slot and redis.call('HGET', key, 't' .. i) == token then
    redis.call('HDEL', key, 't' .. i, 'x' .. i)
  end
end
if slots[slot].expires < now + ttl then
  redis.call('HSET', key, 'x' .. slot, string.format('%.0f', now + ttl))
end
local left = redis.call('PTTL', key)
if left == -1 or left < ttl then
  redis.call('PEXPIRE', key, ttl)
end
return 1
