-- Prolongs our permit on this node. KEYS[1] = the key, ARGV[1] = our
-- token, ARGV[2] = TTL in milliseconds, ARGV[3] = our slot. Only while the
-- slot holds our token; never creates it, never shortens it. Any other slot
-- our token has here (this node granted it another slot than the majority
-- did: see the module doc) is let go, whatever the answer.
-- 1: the slot lives at least ARGV[2] ms from now; 0: it is not ours here;
-- -1: the key is another kind's holder's.
local key, token, ttl, slot = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local id, reply = mine(key, 'semaphore')
if reply then
  return reply
end
local k = tonumber(id)
local slots, now = semaphore_slots(key, k)
local mine = slots[slot] and slots[slot].token == token
local latest = 0
for i, s in pairs(slots) do
  if i ~= slot and s.token == token then
    redis.call('HDEL', key, 't' .. i, 'x' .. i)
  else
    latest = math.max(latest, s.expires)
  end
end
if not mine then
  -- The key lives as long as its latest slot, as `remove` keeps it.
  fit_life(key, latest, now)
  return 0
end
if slots[slot].expires < now + ttl then
  redis.call('HSET', key, 'x' .. slot, whole(now + ttl))
end
prolong(key, ttl, ARGV[2])
return 1
