-- What an observer reads on one node: who leads (record.lua's leader_of)
-- and the leaderships of this node's history above a term (record.lua).
-- KEYS[1] = the key; ARGV[1] = the term above which to list leaderships.
-- {seen, dropped, field, value, ...}: seen, leader_of's reply (0, -1 or
-- its array); dropped, the highest term this history dropped ('0': none);
-- then each leadership above ARGV[1], its field '<term> <token>' and its
-- value '<seq> <#identity> <identity><value>', in no order. The error of
-- a key that is no lock, as leader_of's.
local seen = leader_of(KEYS[1])
if type(seen) == 'table' and seen.err then
  return seen
end
local history = KEYS[1] .. ':terms'
local above = tonumber(ARGV[1])
local reply = {seen, redis.call('HGET', history, 'dropped') or '0'}
local wanted = {}
for _, field in ipairs(redis.call('HKEYS', history)) do
  local t = tonumber(string.match(field, '^(%d+) '))
  if t and t > above then
    wanted[#wanted + 1] = field
  end
end
if #wanted > 0 then
  local values = redis.call('HMGET', history, unpack(wanted))
  for i, field in ipairs(wanted) do
    reply[#reply + 1] = field
    reply[#reply + 1] = values[i]
  end
end
return reply
