-- The reentrant layout: a hash, 'o' = the owner id, 'i' = the smallest
-- hold token in it (what waiters wait for: nodes with the same holds name
-- the key alike, and once a token's release is announced no live key is
-- named by it), and one field per hold, named by the hold's token. The key
-- goes when its last hold does. `look` (keyspace.lua) names it
-- 'reentrant', its identity the owner, and the name its waiters are told
-- 'holds:' and 'i'. The prefix says that one owner goes by several names:
-- nodes that missed a hold name it by another token, and a release
-- announces whichever hold was the smallest there. A waiter that saw such
-- a name on a majority cannot take a copy of another hold's release for a
-- stale one (proto/quorum.rs `Tally::passed` groups them, as it groups
-- readers and a semaphore's holders).

-- The reentrant layout's answer to the key space's `question` about `key`,
-- of the owner `id`, its smallest hold `token` (see keyspace.lua's `ask`):
-- 'told', 'holds:' and that token; 'holds', every hold's token; 'remove',
-- the hold `hold` removed (nil if there is none such), and the key with its
-- last hold, announced by the name told (false while other holds are left:
-- the owner keeps the key); 'room', none, whatever holds are left.
local function reentrant_layout(question, key, id, token, hold)
  if question == 'told' then
    -- (`token` is false for a foreign hash with an 'o' and no 'i'.)
    return token and ('holds:' .. token)
  elseif question == 'holds' then
    local tokens = {}
    for _, field in ipairs(redis.call('HKEYS', key)) do
      if field ~= 'o' and field ~= 'i' then
        tokens[#tokens + 1] = field
      end
    end
    return tokens
  elseif question ~= 'remove' then
    return false
  end
  if hold == 'o' or hold == 'i' or redis.call('HDEL', key, hold) == 0 then
    return nil
  end
  -- Left: 'o', 'i' and the other holds.
  if redis.call('HLEN', key) <= 2 then
    redis.call('DEL', key)
    return 'holds:' .. (token or '')
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
