-- Lets one hold go. KEYS[1] = the key, ARGV[1] = the owner id, ARGV[2] = the
-- hold's token, ARGV[3] = '1' to wake the key's first waiter when the key goes
-- (see queue.lua).
-- Removes this hold's field only; the key goes (and its first waiter is woken, with the
-- token waiters saw, field 'i': then this hold's) when no hold is left in it.
-- Otherwise 'i' stays the smallest hold token left, so that a token once
-- announced names no live key.
-- 1: the hold was there and is gone; 2: the same, the key deleted, but the
-- PUBLISH refused (an ACL); 0: the hold was not there (expired, or never
-- taken on this node); -1: the key is another owner's (a string, or another owner's hash).
local key, owner, token = KEYS[1], ARGV[1], ARGV[2]
local kind = redis.call('TYPE', key).ok
-- A mutex's string is another owner's; any other type is not a lock.
if kind ~= 'none' and kind ~= 'hash' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
if kind == 'hash' and redis.call('HGET', key, 'o') == owner then
  if redis.call('HDEL', key, token) == 0 then
    return 0
  end
  -- Left: 'o', 'i' and the other holds.
  if redis.call('HLEN', key) <= 2 then
    local seen = redis.call('HGET', key, 'i') or ''
    redis.call('DEL', key)
    if ARGV[3] == '1' and not wake(key, seen) then
      return 2
    end
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
elseif kind == 'none' then
  return 0
end
return -1
