-- The key space's one owner: which layout a lock key has, for every kind.
-- This text comes after common.lua and the layouts (each kind's
-- layout.lua, which says how a key of its layout looks, holds, is removed
-- and has room), and before keyspace_queue.lua and queue.lua (for the
-- scripts that queue, wake or let go) and the script's own (see
-- keyspace.rs). A kind's scripts ask
-- `look` what a key is, and speak only of their own layout. The layouts:
--   exclusive (mutex/layout.lua: the mutex, a set's keys, the fenced lock):
--     a string, its one holder's token;
--   reentrant (reentrant/layout.lua): a hash with 'o', the owner;
--   semaphore (semaphore/layout.lua): a hash with 'k', the permits;
--   readers (rwlock/layout.lua: the read-write lock's shared side): a hash
--     with 'R'.
-- Which layout a key has is said here, and only here (`look`); what any
-- kind's script asks of another's key (the name its waiters are told, its
-- holds, removing one, whether it has room) goes through `ask`, to the
-- layout's own function. keyspace_queue.lua words those questions as
-- queue.lua asks them (`waited_for`, `remove`, `room`), in the scripts that
-- queue only.
-- (Plain functions and multiple values, no tables of closures: this text
-- runs on every call, and a table of layouts cost each script a microsecond.)
-- Nothing here wakes or queues: that is queue.lua's, built on `remove` and
-- `room`.

-- What `key` holds: false if it is free; else its layout's name, the
-- holder's identity (the token of an exclusive holder, the owner of
-- reentrant holds, a semaphore's number of permits) and the token waiters
-- wait for (false if unknown; 'permits:<k>' for a semaphore, whose waiters
-- wait for any permit: a prefix only, the name a waiter is told says who
-- holds which slot, see `waited_for`). For a key that no layout claims (a
-- list, say, or a hash without the fields of ours): nil and a WRONGTYPE
-- error reply to return. Such a key is never
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

-- The answer of the layout `layout` (from `look`, with the key's `id` and
-- `token`) to `question` about `key`, from that layout's function (its
-- kind's layout.lua): 'told', the name its waiters are told (see
-- `waited_for`); 'holds', the holds' tokens; 'remove', the hold `hold`
-- removed (see `remove`); 'room', whether a waiter could get in (see
-- `room`).
local function ask(question, key, layout, id, token, hold)
  if layout == 'exclusive' then
    return exclusive_layout(question, key, id, token, hold)
  elseif layout == 'semaphore' then
    return semaphore_layout(question, key, id, token, hold)
  elseif layout == 'readers' then
    return readers_layout(question, key, id, token, hold)
  end
  return reentrant_layout(question, key, id, token, hold)
end
