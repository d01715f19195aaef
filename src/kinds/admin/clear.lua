-- Clears a lock by its token, for an operator who knows it is stale:
-- compare-and-delete, never a blind DEL. KEYS[1] = the key, ARGV[1] = the
-- token (of a mutex or fenced lock, or of one reentrant hold).
-- A string key goes if it holds the token. In a reentrant hash the hold
-- named by the token goes, and the key with it when no hold is left, as the
-- reentrant kind's release.lua does (there 'i' also stays the smallest hold
-- token). A deleted key wakes its first waiter (see queue.lua).
-- 1: cleared; 0: no key; -1: the key holds other tokens, nothing changed.
local key, token = KEYS[1], ARGV[1]
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  return 0
elseif kind == 'string' then
  if redis.call('GET', key) ~= token then
    return -1
  end
  redis.call('DEL', key)
  wake(key, token)
  return 1
elseif kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
if token == 'o' or token == 'i' or redis.call('HDEL', key, token) == 0 then
  return -1
end
if redis.call('HLEN', key) <= 2 then
  local seen = redis.call('HGET', key, 'i') or ''
  redis.call('DEL', key)
  wake(key, seen)
elseif redis.call('HGET', key, 'i') == token then
  local smallest = false
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if field ~= 'o' and field ~= 'i' and (not smallest or field < smallest) then
      smallest = field
    end
  end
  redis.call('HSET', key, 'i', smallest)
end
return 1
