-- The semaphore layout: a hash, 'k' = the number of permits, and per
-- permit slot i (0 to k - 1) held: 't<i>' = its holder's token, 'x<i>' =
-- when it expires, in ms of the node's clock (TIME). A slot is held while
-- its expiry is ahead; the key's own TTL is the latest expiry, and it goes
-- when its last slot is let go. (Expiries in the hash, not per-field TTLs:
-- HPEXPIRE needs Redis 7.4, and Redis 6.2 and 7.0 are served.) `look`
-- (keyspace.lua) names it 'semaphore', its identity k, and its waiters'
-- name 'permits:<k>' (a prefix only: what they are told says who holds
-- which slot, see `semaphore_name`).

-- A semaphore's slots that are held now, by slot number (0 to k - 1):
-- {token = ..., expires = ms of the node's clock}; and the node's time.
local function semaphore_slots(key, k)
  local now = now_ms()
  local slots = {}
  local fields = redis.call('HGETALL', key)
  for n = 1, #fields, 2 do
    local name = fields[n]
    local kind, i = string.sub(name, 1, 1), tonumber(string.sub(name, 2))
    if i and i >= 0 and i < k and (kind == 't' or kind == 'x') then
      local slot = slots[i] or {}
      if kind == 't' then
        slot.token = fields[n + 1]
      else
        slot.expires = tonumber(fields[n + 1])
      end
      slots[i] = slot
    end
  end
  for i, slot in pairs(slots) do
    if not slot.token or not slot.expires or slot.expires <= now then
      slots[i] = nil
    end
  end
  return slots, now
end

-- The name waiters wait for on a semaphore of `k` permits whose held slots
-- are `slots` (from `semaphore_slots`): 'permits:<k>:' and a digest of which
-- token holds which slot ('' for a free one). It names the holders as a
-- set, so that nodes that agree on them name the key alike, whatever order
-- their expiries come in; and it says who holds which slot, so that nodes
-- whose slots went to different contenders (a split vote: each contender's
-- grant on some nodes only) name the key differently, and a waiter sees
-- contention, not a holder (see kinds/semaphore).
local function semaphore_name(k, slots)
  local tokens = {}
  for i = 0, k - 1 do
    tokens[i + 1] = slots[i] and slots[i].token or ''
  end
  return 'permits:' .. k .. ':' .. redis.sha1hex(table.concat(tokens, ','))
end

-- The semaphore layout's answer to the key space's `question` about `key`,
-- of `id` permits (see keyspace.lua's `ask`):
--   'told': `semaphore_name` of its slots (`look` names it by its number of
--     permits alone, with no read of its slots);
--   'holds': '<slot>:<token>' for each held slot, in slot order;
--   'remove': every slot the token `hold` has (a holder keeps one; an
--     acquisition whose nodes granted it different slots left it others,
--     see kinds/semaphore), held or expired; nil if it has none. Announced
--     by the name of the slots as waiters saw them before it went, or by
--     its own token if none of its slots was live (the live set, and so
--     its name, stays: a later release must not be announced by the same);
--   'room': whether a slot is free (let go, or expired).
local function semaphore_layout(question, key, id, token, hold)
  if question == 'told' then
    -- A `k` that is no number (a foreign hash) reads as none held.
    local k = tonumber(id) or 0
    return semaphore_name(k, (semaphore_slots(key, k)))
  elseif question == 'holds' then
    local tokens = {}
    local slots = semaphore_slots(key, tonumber(id))
    for i = 0, tonumber(id) - 1 do
      if slots[i] then
        tokens[#tokens + 1] = i .. ':' .. slots[i].token
      end
    end
    return tokens
  elseif question == 'room' then
    local k = tonumber(id) or 0
    local held = 0
    for _ in pairs((semaphore_slots(key, k))) do
      held = held + 1
    end
    return held < k
  end
  local k = tonumber(id)
  local before = semaphore_slots(key, k)
  local live = false
  for _, slot in pairs(before) do
    live = live or slot.token == hold
  end
  local name = live and semaphore_name(k, before) or hold
  local found = false
  for i = 0, k - 1 do
    if redis.call('HGET', key, 't' .. i) == hold then
      redis.call('HDEL', key, 't' .. i, 'x' .. i)
      found = true
    end
  end
  if not found then
    return nil
  end
  -- The key lives as long as its latest slot, so that a key is there
  -- exactly while a slot is held.
  local slots, now = semaphore_slots(key, k)
  local latest = 0
  for _, slot in pairs(slots) do
    latest = math.max(latest, slot.expires)
  end
  fit_life(key, latest, now)
  return name
end
