-- The readers layout (the read-write lock's shared side): a hash, 'R' =
-- '1', and one field per reader, named by its token, holding when its
-- share expires (ms of the node's clock). A share is held while its expiry
-- is ahead; the key lives as long as its latest share, and goes with its
-- last. (A writer is the exclusive layout on the same key. Beside it,
-- `<key>:intent` names a writer that waits for the readers: see
-- queue.lua's `refuse`.) `look` (keyspace.lua) names it 'readers', and
-- its identity and waiters' name 'readers' too (what waiters are told says
-- which readers: see `readers_name` in `readers_layout`).

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

-- The readers layout's answer to the key space's `question` about `key`
-- (see keyspace.lua's `ask`):
--   'told': `readers_name` of the shares held now (`look` names them all
--     'readers'), or `token` where none is;
--   'holds': the readers' tokens, sorted;
--   'remove': the share `hold` removed (nil if there is none such), and
--     expired shares with it. Only the last reader's going frees the key
--     for what waits (writers): announced by the name of the readers as
--     waiters saw them before it went, this one alone if it was live (none
--     other is), else its token; false while other shares are left;
--   'room': 'readers', who let other readers in (whether a writer's intent
--     turns them away is queue.lua's to say).
local function readers_layout(question, key, id, token, hold)
  -- The name waiters wait for on a readers key whose shares held now are
  -- `shares` (from `reader_shares`): 'readers:' and a digest of their
  -- tokens, sorted, so that nodes with the same readers name the key alike;
  -- and a new name for every new set of readers, so that the last reader's
  -- release, announced by the name of the readers it ended, never stands for
  -- later readers ('remove' below). Nil where no share is held. (Made here,
  -- on a call about readers, not before every script: each function of the
  -- prelude is made anew on every call of every script.)
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
  if question == 'told' then
    return readers_name((reader_shares(key))) or token
  elseif question == 'holds' then
    local tokens = {}
    for t in pairs((reader_shares(key))) do
      tokens[#tokens + 1] = t
    end
    table.sort(tokens)
    return tokens
  elseif question == 'room' then
    return 'readers'
  end
  if hold == 'R' then
    return nil
  end
  local expires = tonumber(redis.call('HGET', key, hold))
  if redis.call('HDEL', key, hold) == 0 then
    return nil
  end
  local _, now, latest = reader_shares(key, true)
  fit_life(key, latest, now)
  if latest ~= 0 then
    return false
  end
  if expires and expires > now then
    return readers_name({ [hold] = expires })
  end
  return hold
end
