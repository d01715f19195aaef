-- The key space's one owner: what a lock key is, for every kind. This text
-- comes first in every script, before queue.lua (for the scripts that queue,
-- wake or let go) and the script's own (see keyspace.rs). A kind's scripts
-- ask `look` what a key is, and speak only of their own layout. Every
-- layout a lock key can have is read here, and only here:
--   exclusive (the mutex, a set's keys, the fenced lock): a string, its one
--     holder's token, as `SET key token NX PX ttl` makes it here and in
--     every other Redlock client;
--   reentrant: a hash, 'o' = the owner id, 'i' = the smallest hold token in
--     it (what waiters wait for: nodes with the same holds name the key
--     alike, and once a token's release is announced no live key is named
--     by it), and one field per hold, named by the hold's token. The key
--     goes when its last hold does.
--   semaphore: a hash, 'k' = the number of permits, and per permit slot i
--     (0 to k - 1) held: 't<i>' = its holder's token, 'x<i>' = when it
--     expires, in ms of the node's clock (TIME). A slot is held while its
--     expiry is ahead; the key's own TTL is the latest expiry, and it goes
--     when its last slot is let go. (Expiries in the hash, not per-field
--     TTLs: HPEXPIRE needs Redis 7.4, and Redis 6.2 and 7.0 are served.)
--   readers (the read-write lock's shared side): a hash, 'R' = '1', and one
--     field per reader, named by its token, holding when its share expires
--     (ms of the node's clock). A share is held while its expiry is ahead;
--     the key lives as long as its latest share, and goes with its last.
--     (A writer is the exclusive layout on the same key. Beside it,
--     `<key>:intent` names a writer that waits for the readers: see
--     queue.lua's `refuse`.)
-- (Plain functions and multiple values, no tables of closures: this text
-- runs on every call, and a table of layouts cost each script a microsecond.)
-- Nothing here wakes or queues: that is queue.lua's, built on `remove` and
-- `room`.
--
-- Numbers. A Lua 5.1 number is a double, and `redis.call` hands one to
-- Redis as '%.17g' text (Redis 6.2 and 7.0): 1e17 and above in exponent
-- form ('4.6116860184273879e+18'), which PEXPIRE, PX and every other
-- integer argument refuse. So every number a script computes goes to
-- Redis through `whole` (its exact integer digits), and every life it
-- computes for a key through `lifespan` (the same, clamped to LONGEST); a
-- number given by the caller goes as given, its text. Above 2^53 a double
-- is exact only to its spacing (up to 1024 ms near MAX_TTL, about 146
-- million years): a PTTL read there, or a TTL compared with one, is off by
-- up to half of that. Rounding keeps order, so no key is ever shortened by it;
-- a key may be prolonged to up to 512 ms less than asked, far inside the
-- drift allowance the client deducts at such a TTL (1% of it).

-- The longest life, in ms, that a script gives a key it computes one for:
-- 2^62, MAX_TTL plus 1 ms. Redis refuses an expiry whose absolute time in ms
-- overflows a signed 64-bit integer; below 2^62 none does, whatever the
-- node's clock shows (until the year 146 million). A queue behind a lock
-- held near MAX_TTL lives that long: about as long as the lock key, without
-- the few seconds past it that it would have had (moot, at that age).
local LONGEST = 4611686018427387904

-- The whole number `n` as Redis reads one: its exact integer digits, never
-- an exponent (see Numbers above).
local function whole(n)
  return string.format('%.0f', n)
end

-- A key's life of `ms` milliseconds, for PEXPIRE or PX: `whole`, at most
-- LONGEST.
local function lifespan(ms)
  return whole(math.min(ms, LONGEST))
end

-- What `key` holds: false if it is free; else its layout's name, the
-- holder's identity (the token of an exclusive holder, the owner of
-- reentrant holds, a semaphore's number of permits) and the token waiters
-- wait for (false if unknown; 'permits:<k>' for a semaphore, whose waiters
-- wait for any permit: a prefix only, the name a waiter is told says who
-- holds which slot, see `waited_for`). For a
-- key that no layout claims (a list, say, or a hash without the fields of
-- ours): nil and a WRONGTYPE error reply to return. Such a key is never
-- "held" or "free"; it is a mistake to say plainly. `strings`: the caller
-- expects a string (the exclusive kinds): GET first, one call where the
-- key is one. Others ask TYPE first: a GET on a hash is an error reply
-- that the node counts (errorstat_WRONGTYPE), and every call of a
-- reentrant lock or a semaphore would raise a node's error rate.
local function look(key, strings)
  local kind
  if strings then
    local v = redis.pcall('GET', key)
    if not v then
      return false
    elseif type(v) == 'string' then
      return 'exclusive', v, v
    end
    kind = redis.call('TYPE', key).ok
  else
    kind = redis.call('TYPE', key).ok
    if kind == 'none' then
      return false
    elseif kind == 'string' then
      local v = redis.call('GET', key)
      return 'exclusive', v, v
    end
  end
  if kind == 'hash' then
    local owner, smallest, permits, readers =
      unpack(redis.call('HMGET', key, 'o', 'i', 'k', 'R'))
    if owner then
      return 'reentrant', owner, smallest
    elseif permits then
      -- Waiters wait for any permit: one name for them all.
      return 'semaphore', permits, 'permits:' .. permits
    elseif readers then
      -- And for every reader to go: one name for them all (the name a
      -- waiter is told says which readers, see `waited_for`).
      return 'readers', 'readers', 'readers'
    end
  end
  return nil, redis.error_reply('WRONGTYPE the lock key holds a ' .. kind .. ' that is no lock')
end

-- For a script that acts on a hold it has (an extension, a release):
-- `key`'s identity and waiters' token (see `look`) if the key is in layout
-- `name` and, given `me`, held by `me`; else nil and the reply to return:
-- the error of a key that is no lock, 0 for a free key (nothing of ours
-- there), -1 for another holder's.
local function mine(key, name, me)
  local layout, id, token = look(key)
  if layout == nil then
    return nil, id
  elseif not layout then
    return nil, 0
  elseif layout ~= name or (me and id ~= me) then
    return nil, -1
  end
  return id, nil, token
end

-- Makes `key` live at least `ttl` ms (`ms`: the same number as given, a
-- string), never shortening it: another hold, or a newer extension, may
-- count on a longer life. A key without an expiry (someone ran PERSIST)
-- gets one, not eternity.
local function prolong(key, ttl, ms)
  local left = redis.call('PTTL', key)
  if left == -1 or left < ttl then
    redis.call('PEXPIRE', key, ms)
  end
end

-- The node's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- A readers key's shares held now: {token = expiry}, the node's time, and
-- the latest expiry (0 for none). With `purge`, the shares that have
-- expired (their readers gone without a release) are deleted on the way.
local function reader_shares(key, purge)
  local now = now_ms()
  local shares, latest = {}, 0
  local fields = redis.call('HGETALL', key)
  for n = 1, #fields, 2 do
    local expires = tonumber(fields[n + 1])
    if fields[n] ~= 'R' and expires then
      if expires > now then
        shares[fields[n]] = expires
        latest = math.max(latest, expires)
      elseif purge then
        redis.call('HDEL', key, fields[n])
      end
    end
  end
  return shares, now, latest
end

-- The name waiters wait for on a readers key whose shares held now are
-- `shares` (from `reader_shares`): 'readers:' and a digest of their
-- tokens, sorted, so that nodes with the same readers name the key alike;
-- and a new name for every new set of readers, so that the last reader's
-- release, announced by the name of the readers it ended, never stands for
-- later readers (see `remove`). Nil where no share is held.
local function readers_name(shares)
  local tokens = {}
  for token in pairs(shares) do
    tokens[#tokens + 1] = token
  end
  if #tokens == 0 then
    return nil
  end
  table.sort(tokens)
  return 'readers:' .. redis.sha1hex(table.concat(tokens, ','))
end

-- The name waiters wait for of `key`, which `look` found in `layout`, with
-- `id` and `token`: `token`, but for a semaphore (`semaphore_name`: `look`
-- names it by its number of permits alone, with no read of its slots) and
-- for readers (`readers_name`: `look` names them all 'readers'). A
-- release announces the holder by this name (see `remove`).
local function waited_for(key, layout, id, token)
  if layout == 'semaphore' then
    -- A `k` that is no number (a foreign hash) reads as none held.
    local k = tonumber(id) or 0
    return semaphore_name(k, (semaphore_slots(key, k)))
  elseif layout == 'readers' then
    return readers_name((reader_shares(key))) or token
  end
  return token
end

-- Keeps `key` exactly as long as its latest share or slot (`latest`, ms of
-- the node's clock at `now`): deleted if there is none.
local function fit_life(key, latest, now)
  if latest == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, lifespan(latest - now))
  end
end

-- The tokens of the holds in `key`, of `layout` (from `look`).
local function holds(key, layout, id)
  if layout == 'exclusive' then
    return {id}
  elseif layout == 'readers' then
    local tokens = {}
    for token in pairs((reader_shares(key))) do
      tokens[#tokens + 1] = token
    end
    table.sort(tokens)
    return tokens
  elseif layout == 'semaphore' then
    local tokens = {}
    local slots = semaphore_slots(key, tonumber(id))
    for i = 0, tonumber(id) - 1 do
      if slots[i] then
        tokens[#tokens + 1] = i .. ':' .. slots[i].token
      end
    end
    return tokens
  end
  local tokens = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if field ~= 'o' and field ~= 'i' then
      tokens[#tokens + 1] = field
    end
  end
  return tokens
end

-- Removes the hold `hold` of `key`, whatever its layout (`layout`, `id`,
-- `token`: from `look`), as the key's own kind would. Nil if the key has no
-- such hold; false if it is removed and nothing was freed that a waiter
-- could take (a reentrant owner's other holds are left); else the token to
-- announce to waiters: the name they were told (`waited_for`) of the holds
-- as they were just before. A waiter whose attempt raced the release (it
-- reached some nodes before the release did, and was told that name there)
-- knows by it that the holder it saw is going, and tries again at once
-- (engine/acquire.rs); announced by another name, it slept out the
-- holder's PTTL with the lock free, its turn spent. (A semaphore's slot
-- and the last reader were announced by the hold's own token, their
-- waiters told `permits:<k>:<digest>` and `readers`.) Where no hold is
-- held any more (all expired, the key about to), the hold's own token,
-- unique as a holder's.
local function remove(key, layout, id, token, hold)
  if layout == 'exclusive' then
    if id ~= hold then
      return nil
    end
    redis.call('DEL', key)
    return id
  elseif layout == 'semaphore' then
    -- Every slot the token has (a holder keeps one; an acquisition whose
    -- nodes granted it different slots left it others, see
    -- kinds/semaphore), held or expired.
    local k = tonumber(id)
    -- The name of the slots as waiters saw them, before this one goes; its
    -- own token if none of its slots was live (the live set, and so its
    -- name, stays: a later release must not be announced by the same).
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
  elseif layout == 'readers' then
    if hold == 'R' then
      return nil
    end
    local expires = tonumber(redis.call('HGET', key, hold))
    if redis.call('HDEL', key, hold) == 0 then
      return nil
    end
    local _, now, latest = reader_shares(key, true)
    fit_life(key, latest, now)
    -- Only the last reader's going frees the key for what waits (writers),
    -- announced by the name of the readers as waiters saw them before it
    -- went: this one alone, if it was live (none other is), else its token.
    if latest ~= 0 then
      return false
    end
    if expires and expires > now then
      return readers_name({ [hold] = expires })
    end
    return hold
  end
  if hold == 'o' or hold == 'i' or redis.call('HDEL', key, hold) == 0 then
    return nil
  end
  -- Left: 'o', 'i' and the other holds.
  if redis.call('HLEN', key) <= 2 then
    redis.call('DEL', key)
    return token or ''
  end
  -- 'i' stays the smallest hold token left.
  if token == hold then
    local smallest = false
    for _, field in ipairs(redis.call('HKEYS', key)) do
      if field ~= 'o' and field ~= 'i' and (not smallest or field < smallest) then
        smallest = field
      end
    end
    redis.call('HSET', key, 'i', smallest)
  end
  return false
end

-- Whether `key` has room for a waiter, as far as its layout says: true if
-- it is free, or a semaphore with a slot free (let go, or expired);
-- 'readers' for readers, who let other readers in (whether a writer's
-- intent turns them away is queue.lua's to say); false for an exclusive or
-- reentrant holder, a full semaphore, and a key that is no lock. What a
-- pass-on or a leave asks before it wakes the next waiter (queue.lua's
-- `vacant`): a turn lost there leaves the room idle until a timer. (TYPE
-- first: a string, the exclusive layout, has no room whoever holds it, and
-- a leave costs its node no read of it.)
local function room(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then
    return true
  elseif kind ~= 'hash' then
    return false
  end
  local layout, id = look(key)
  if layout == 'semaphore' then
    local k = tonumber(id) or 0
    local held = 0
    for _ in pairs((semaphore_slots(key, k))) do
      held = held + 1
    end
    return held < k
  elseif layout == 'readers' then
    return 'readers'
  end
  return false
end
