-- What queue.lua asks the key space's owner (keyspace.lua), in its words:
-- the name a refused waiter is told, a hold removed, whether a key has
-- room. This text comes after keyspace.lua and before queue.lua, in the
-- scripts that queue, wake or let go only: the others (extensions, reads)
-- do without these three functions, each made anew on every call (see
-- keyspace.rs).

-- The name waiters wait for of `key`, which `look` found in `layout`, with
-- `id` and `token`: `token`, but for a semaphore (`semaphore_name`: `look`
-- names it by its number of permits alone, with no read of its slots) and
-- for readers (`readers_name`: `look` names them all 'readers'), and
-- `holds:` and `token` for a reentrant owner: their layouts' answers
-- (semaphore/layout.lua, rwlock/layout.lua, reentrant/layout.lua). A
-- release announces the holder by this name (see `remove`).
local function waited_for(key, layout, id, token)
  return ask('told', key, layout, id, token)
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
  return ask('remove', key, layout, id, token, hold)
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
  local layout, id, token = look(key)
  if not layout then
    return false
  end
  return ask('room', key, layout, id, token)
end
