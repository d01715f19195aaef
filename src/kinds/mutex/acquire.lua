-- Takes every key or none. KEYS = the lock's keys (sorted, no duplicates),
-- ARGV[1] = our token, ARGV[2] = TTL in milliseconds, ARGV[3] = the waiter
-- ('' for none): it is told who holds a key we could not take, and queues
-- for that key (see queue.lua).
-- The plain one-key lock takes its key with SET NX PX instead; this script
-- serves it only when a waiter wants to know who holds the key.
-- 1: every key is ours (also when run twice); 0: a key is held by another
-- holder, of any kind, and nothing was taken; {holder, pttl}: the same,
-- with the holder's token (false if unknown) and that key's PTTL.
local absent = {}
for _, key in ipairs(KEYS) do
  local layout, id, token = look(key, true)
  if layout == nil then
    return id
  elseif not layout then
    absent[#absent + 1] = key
  elseif layout ~= 'exclusive' or id ~= ARGV[1] then
    return refuse(key, ARGV[3], layout, id, token)
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
