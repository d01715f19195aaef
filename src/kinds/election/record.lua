-- The election's record: beside a leader's lock key `key` (the fenced
-- kind's exclusive layout), `<key>:leader` is a hash saying who leads:
-- 't' = the leader's lock token (the record is the lock's only while the
-- key holds that token), 'n' = its identity, 'v' = its published value,
-- 'f' = its term (the fencing token), 's' = the number of its latest
-- proclamation (0 for the value it campaigned with). It lives as long as
-- the key (a dead leader's goes with its key). Changes are published on
-- the channel `<key>:leader` for observers. A lock named `<name>:leader`
-- would be this record's key: do not name resources so.

-- Writes the record of the leader `token` (identity, value, term, seq),
-- unless it is there already with that proclamation or a later one; a
-- change is published ('<term> <seq>'). true if the record changed.
local function write_record(key, token, identity, value, term, seq)
  local record = key .. ':leader'
  local t, s = unpack(redis.call('HMGET', record, 't', 's'))
  if t == token and tonumber(s) and tonumber(s) >= tonumber(seq) then
    return false
  end
  redis.call('HSET', record, 't', token, 'n', identity, 'v', value, 'f', term, 's', seq)
  -- Best effort: an ACL that forbids it costs observers their poll.
  redis.pcall('PUBLISH', record, term .. ' ' .. seq)
  return true
end

-- Gives the record of `key` the key's life (never none: the key has one),
-- as exactly as a double holds it (see keyspace.lua's Numbers).
local function keep_record(key)
  local left = redis.call('PTTL', key)
  if left > 0 then
    redis.call('PEXPIRE', key .. ':leader', lifespan(left))
  end
end
