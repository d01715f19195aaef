-- Takes one permit of a semaphore on this node: one of its k slots (the
-- layout: layout.lua). KEYS[1] = the key, ARGV[1] = our token, ARGV[2] =
-- TTL in milliseconds, ARGV[3] = k, ARGV[4] = the slot to take if it is
-- free (the caller's hint), ARGV[5] = the waiter ('' for none): it is told
-- when the first slot expires when every slot is held, and queues for the
-- key (see queue.lua).
-- (Every number written is a string, as given or formatted by `whole`:
-- Lua would write a large one as 1e+17, which Redis 6.2 and 7.0 refuse.)
-- {'slot', i, free}: slot i is ours, for the TTL (also when run twice: then
-- the slot we have, never shortened); free is k characters, '1' where a
-- slot was free here (or ours) and '0' where another holder has it, for
-- the caller's next hint should the nodes' grants differ; 0: every slot is
-- held, or the key is another kind's, and nothing changed; {holder, pttl}:
-- the same, with the name of the semaphore's holders, 'permits:<k>:<digest
-- of who holds which slot>' (layout.lua's `semaphore_name`), and the
-- soonest slot's PTTL (or the other kind's holder and its key's PTTL);
-- error PERMITS <n>: the key is a semaphore of n permits, not k.
local key, token, ttl, k = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hint = tonumber(ARGV[4])
local layout, id, holder = look(key)
if layout == nil then
  return id
elseif layout and layout ~= 'semaphore' then
  return refuse(key, ARGV[5], layout, id, holder)
elseif layout and tonumber(id) ~= k then
  return redis.error_reply('PERMITS ' .. id)
end
local slots, now
if layout then
  slots, now = semaphore_slots(key, k)
else
  slots, now = {}, now_ms()
end
local free = {}
for i = 0, k - 1 do
  free[i + 1] = (slots[i] and slots[i].token ~= token) and '0' or '1'
end
free = table.concat(free)
for i, slot in pairs(slots) do
  if slot.token == token then
    return {'slot', i, free}
  end
end
local take = nil
if hint and hint >= 0 and hint < k and not slots[hint] then
  take = hint
else
  for i = 0, k - 1 do
    if not slots[i] then
      take = i
      break
    end
  end
end
if not take then
  if ARGV[5] == '' then
    return 0
  end
  -- Named by its holders as a set, slot by slot (`semaphore_name`): nodes
  -- that agree on them name it alike (whichever slot ends first on each),
  -- nodes whose slots went to contenders that split the vote do not. With
  -- the soonest expiry here: waiters wait for any permit, and wake when any
  -- is let go.
  local soonest = nil
  for _, slot in pairs(slots) do
    if not soonest or slot.expires < soonest then
      soonest = slot.expires
    end
  end
  local pttl = soonest - now
  enqueue(key, ARGV[5], pttl + QUEUE_SLACK)
  return {semaphore_name(k, slots), pttl}
end
redis.call('HSET', key, 'k', whole(k), 't' .. take, token, 'x' .. take, whole(now + ttl))
prolong(key, ttl, ARGV[2])
if ARGV[5] ~= '' then
  dequeue(key, ARGV[5])
end
return {'slot', take, free}
