-- Takes every key or none. KEYS = the lock's keys (sorted, no duplicates),
-- ARGV[1] = our token, ARGV[2] = TTL in milliseconds, ARGV[3] = the waiter
-- ('' for none): it is told who holds a key we could not take, and queues
-- for that key (see queue.lua).
-- The plain one-key lock takes its key with SET NX PX instead; this script
-- serves it only when a waiter wants to know who holds the key.
-- 1: every key is ours (also when run twice); 0: a key is held by another
-- owner, and nothing was taken; {holder, pttl}: the same, with the holder's
-- token (false if unknown) and that key's PTTL.
local absent = {}
for _, key in ipairs(KEYS) do
  -- A reentrant lock's hash is another owner's; a key of any other type
  -- is not a lock, and the node's WRONGTYPE error says so.
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and redis.call('TYPE', key).ok ~= 'hash' then
    return v
  end
  if v and v ~= ARGV[1] then
    if ARGV[3] == '' then
      return 0
    end
    local holder = v
    if type(v) == 'table' then
      holder = redis.call('HGET', key, 'i')
    end
    local pttl = redis.call('PTTL', key)
    enqueue(key, ARGV[3], math.max(pttl, 0) + QUEUE_SLACK)
    return {holder, pttl}
  end
  if not v then
    absent[#absent + 1] = key
  end
end
-- Only the keys that were absent: a key already ours (this script run twice,
-- after a reconnect) may have been extended since, and is never shortened.
for _, key in ipairs(absent) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
if ARGV[3] ~= '' then
  for _, key in ipairs(KEYS) do
    dequeue(key, ARGV[3])
  end
end
return 1
