-- Takes a reader's share of the lock (the readers layout: layout.lua).
-- KEYS[1] = the key, ARGV[1] = our token, ARGV[2] = TTL in milliseconds,
-- ARGV[3] = the waiter ('' for none): told who keeps it out, and queued;
-- ARGV[4] = '1' for a nested read (its task reads the key already: a
-- writer's intent does not turn it away, as it waits for that task anyway).
-- 1: our share is held, for the TTL (also when run twice: never
-- shortened); 0: a writer (or another kind) holds the key, or a writer
-- waits for the readers (its intent: see queue.lua's `refuse`), and
-- nothing changed; {holder, pttl}: the same, with the holder's token and
-- its key's PTTL, or 'intent' and the intent's.
local key, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local layout, id, holder = look(key)
if layout == nil then
  return id
elseif layout and layout ~= 'readers' then
  return refuse(key, ARGV[3], layout, id, holder)
end
local now = now_ms()
if layout then
  local ours = tonumber(redis.call('HGET', key, token))
  if ours and ours > now then
    return 1
  end
end
-- A writer waits for the readers: new ones are turned away, so that it
-- gets in once the current ones end.
if ARGV[4] ~= '1' and intent_of(key) then
  local intent = redis.call('PTTL', key .. ':intent')
  if ARGV[3] == '' then
    return 0
  end
  enqueue(key, ARGV[3], intent + QUEUE_SLACK)
  return {'intent', intent}
end
-- Shares whose readers are gone without a release go now (their fields
-- would pile up while other readers keep the key alive).
if layout then
  reader_shares(key, true)
end
redis.call('HSET', key, 'R', '1', token, whole(now + ttl))
prolong(key, ttl, ARGV[2])
if ARGV[3] ~= '' then
  dequeue(key, ARGV[3])
  -- The next waiter may be a reader too, which can share now: it is woken
  -- to try (a writer tries, is kept out, and leaves its intent).
  if redis.call('EXISTS', key .. ':waiters') == 1 then
    wake(key, 'joined:' .. token)
  end
end
return 1
