-- What one node holds for a resource, for an operator; changes nothing.
-- KEYS[1] = the lock's key, KEYS[2] = its fencing counter.
-- {type, holder, pttl, counter, hold...}: type is what TYPE says of the key
-- ('none', 'string' for the mutex and the fenced lock, 'hash' for reentrant
-- holds, anything else is not a lock); holder is the string's value (the
-- holder's token) or the hash's owner id, false otherwise; pttl is the key's
-- PTTL; counter is the fencing counter's value, false if there is none; for
-- a hash, one hold token per hold after them.
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then
  counter = false
end
local reply = {kind, false, redis.call('PTTL', key), counter}
if kind == 'string' then
  reply[2] = redis.call('GET', key)
elseif kind == 'hash' then
  reply[2] = redis.call('HGET', key, 'o') or false
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if field ~= 'o' and field ~= 'i' then
      reply[#reply + 1] = field
    end
  end
end
return reply
