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
-- (Plain functions and multiple values, no tables of closures: this text
-- runs on every call, and a table of layouts cost each script a microsecond.)
-- Nothing here wakes or queues: that is queue.lua's, built on `remove`.

-- What `key` holds: false if it is free; else its layout's name, the
-- holder's identity (the token of an exclusive holder, the owner of
-- reentrant holds) and the token waiters wait for (false if unknown). For a
-- key that no layout claims (a list, say, or a hash of somebody else's):
-- nil and the error reply to return. Such a key is never "held" or "free";
-- it is a mistake to say plainly, as the node's WRONGTYPE error does.
local function look(key)
  local v = redis.pcall('GET', key)
  if not v then
    return false
  elseif type(v) == 'string' then
    return 'exclusive', v, v
  end
  local kind = redis.call('TYPE', key).ok
  if kind == 'hash' then
    local owner, smallest = unpack(redis.call('HMGET', key, 'o', 'i'))
    if owner then
      return 'reentrant', owner, smallest
    end
  end
  return nil, redis.error_reply('WRONGTYPE the lock key holds a ' .. kind .. ' that is no lock')
end

-- The tokens of the holds in `key`, of `layout` (from `look`).
local function holds(key, layout, id)
  if layout == 'exclusive' then
    return {id}
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
-- such hold; else whether the key went with it.
local function remove(key, layout, id, token, hold)
  if layout == 'exclusive' then
    if id ~= hold then
      return nil
    end
    redis.call('DEL', key)
    return true
  end
  if hold == 'o' or hold == 'i' or redis.call('HDEL', key, hold) == 0 then
    return nil
  end
  -- Left: 'o', 'i' and the other holds.
  if redis.call('HLEN', key) <= 2 then
    redis.call('DEL', key)
    return true
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
