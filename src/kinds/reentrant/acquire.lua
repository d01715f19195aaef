-- Takes one hold for an owner. KEYS[1] = the key, ARGV[1] = the owner id,
-- ARGV[2] = this hold's token, ARGV[3] = TTL in milliseconds, ARGV[4] = the
-- waiter ('' for none): it is told who holds the key when it is another
-- owner's, and queues for it (see queue.lua).
-- The key is a hash: 'o' = the owner id, 'i' = the smallest hold token in it
-- (what waiters wait for: nodes with the same holds name the key alike), and
-- one field per hold, named by the hold's token. A hold is a field, not a
-- count: see the module doc.
-- 1: the hold is taken (also when run twice), and the key lives at least the
-- TTL; 0: another owner's key (a string, or another owner's hash), nothing changed; {holder, pttl}:
-- the same, with the holder's token (false if unknown) and the key's PTTL.
local key, owner, token, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local kind = redis.call('TYPE', key).ok
-- A mutex's string is another owner's; any other type is not a lock.
if kind ~= 'none' and kind ~= 'hash' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind)
end
if kind == 'none' then
  redis.call('HSET', key, 'o', owner, 'i', token, token, '1')
  redis.call('PEXPIRE', key, ARGV[3])
  if ARGV[4] ~= '' then
    dequeue(key, ARGV[4])
  end
  return 1
end
if kind == 'hash' and redis.call('HGET', key, 'o') == owner then
  redis.call('HSET', key, token, '1')
  local smallest = redis.call('HGET', key, 'i')
  if not smallest or token < smallest then
    redis.call('HSET', key, 'i', token)
  end
  -- Refreshed, never shortened: another hold may count on a longer life.
  local left = redis.call('PTTL', key)
  if left == -1 or left < ttl then
    redis.call('PEXPIRE', key, ARGV[3])
  end
  if ARGV[4] ~= '' then
    dequeue(key, ARGV[4])
  end
  return 1
end
if ARGV[4] == '' then
  return 0
end
local holder = false
if kind == 'string' then
  holder = redis.call('GET', key)
elseif kind == 'hash' then
  holder = redis.call('HGET', key, 'i')
end
local pttl = redis.call('PTTL', key)
enqueue(key, ARGV[4], math.max(pttl, 0) + QUEUE_SLACK)
return {holder, pttl}
