-- What one node holds for a resource, for an operator; changes nothing.
-- KEYS[1] = the lock's key, KEYS[2] = its fencing counter.
-- {layout, holder, pttl, counter, hold...}: layout is the key's layout as
-- keyspace.lua names it ('none' for a free key), or, for a key that is no
-- lock, the type Redis names; holder is the holder's identity (an
-- exclusive holder's token, reentrant holds' owner), false otherwise; pttl
-- is the key's PTTL; counter is the fencing counter's value, false if there
-- is none; then the token of each hold in the key.
local key = KEYS[1]
local counter = redis.pcall('GET', KEYS[2])
if type(counter) ~= 'string' then
  counter = false
end
local layout, id = look(key)
if layout == nil then
  return {redis.call('TYPE', key).ok, false, redis.call('PTTL', key), counter}
elseif not layout then
  return {'none', false, redis.call('PTTL', key), counter}
end
local reply = {layout, id, redis.call('PTTL', key), counter}
for _, token in ipairs(ask('holds', key, layout, id)) do
  reply[#reply + 1] = token
end
return reply
