-- The exclusive layout (the mutex, a set's keys, the fenced lock, an
-- election's leader): a string, its one holder's token, as
-- `SET key token NX PX ttl` makes it here and in every other Redlock
-- client. `look` (keyspace.lua) names it 'exclusive', its identity and the
-- name its waiters are told both the token: a holder is told from another
-- by its token, drawn fresh for every attempt.

-- The exclusive layout's answer to the key space's `question` about `key`,
-- held by the token `id` (see keyspace.lua's `ask`): 'told', the token;
-- 'holds', the token alone; 'remove', the key deleted if `hold` is its
-- token (nil if not), announced by that token; 'room', none, whoever holds
-- it.
local function exclusive_layout(question, key, id, token, hold)
  if question == 'told' then
    return token
  elseif question == 'holds' then
    return {id}
  elseif question == 'remove' then
    if id ~= hold then
      return nil
    end
    redis.call('DEL', key)
    return id
  end
  return false
end
