-- The election's record: beside a leader's lock key `key` (the fenced
-- kind's exclusive layout), `<key>:leader` is a hash saying who leads:
-- 't' = the leader's lock token (the record is the lock's only while the
-- key holds that token), 'n' = its identity, 'v' = its published value,
-- 'f' = its term (the fencing token), 's' = the number of its latest
-- proclamation (0 for the value it campaigned with). It lives as long as
-- the key (a dead leader's goes with its key). Changes are published on
-- the channel `<key>:leader` for observers. A lock named `<name>:leader`
-- would be this record's key: do not name resources so.
--
-- Beside it, `<key>:terms` is the election's **history** on this node: a
-- hash of the leaderships whose record was written here, the latest
-- HISTORY_KEEP of them by term. Field '<term> <token>', value
-- '<seq> <#identity> <identity><value>' (the latest proclamation written
-- here); field 'dropped' = the highest term dropped to keep HISTORY_KEEP
-- (absent: none dropped). It has no TTL, as the fencing counter has none:
-- observers read it (observe.lua) to yield the leaderships that began and
-- ended between two of their reads, and a history that lapsed could not
-- say what it had lost. A lock named `<name>:terms` would be this history.

-- How many leaderships each node's history keeps.
local HISTORY_KEEP = 32

-- Notes the leadership `token` of `term` in the history, with its identity
-- and its latest value here; a new one drops the lowest terms beyond
-- HISTORY_KEEP, and says so in 'dropped'.
local function log_leader(key, token, identity, value, term, seq)
  local history = key .. ':terms'
  local added = redis.call('HSET', history, term .. ' ' .. token,
    seq .. ' ' .. #identity .. ' ' .. identity .. value)
  if added == 0 or redis.call('HLEN', history) <= HISTORY_KEEP then
    return
  end
  local held = {}
  for _, field in ipairs(redis.call('HKEYS', history)) do
    local t = tonumber(string.match(field, '^(%d+) '))
    if t then
      held[#held + 1] = {t, field}
    end
  end
  if #held <= HISTORY_KEEP then
    return
  end
  table.sort(held, function(a, b) return a[1] < b[1] end)
  local dropped = tonumber(redis.call('HGET', history, 'dropped') or '0') or 0
  for i = 1, #held - HISTORY_KEEP do
    redis.call('HDEL', history, held[i][2])
    dropped = math.max(dropped, held[i][1])
  end
  redis.call('HSET', history, 'dropped', string.format('%.0f', dropped))
end

-- Writes the record of the leader `token` (identity, value, term, seq),
-- unless it is there already with that proclamation or a later one; a
-- change is noted in the history and published ('<term> <seq>'). true if
-- the record changed.
local function write_record(key, token, identity, value, term, seq)
  local record = key .. ':leader'
  local t, s = unpack(redis.call('HMGET', record, 't', 's'))
  if t == token and tonumber(s) and tonumber(s) >= tonumber(seq) then
    return false
  end
  -- The history first: a `<key>:terms` that is no hash fails the script
  -- before the record is written.
  log_leader(key, token, identity, value, term, seq)
  redis.call('HSET', record, 't', token, 'n', identity, 'v', value, 'f', term, 's', seq)
  -- Best effort: an ACL that forbids it costs observers their poll.
  redis.pcall('PUBLISH', record, term .. ' ' .. seq)
  return true
end

-- Gives the record of `key` the key's life (never none: the key has one),
-- as exactly as a double holds it (see common.lua's Numbers).
local function keep_record(key)
  local left = redis.call('PTTL', key)
  if left > 0 then
    redis.call('PEXPIRE', key .. ':leader', lifespan(left))
  elseif left == 0 then
    -- Under a millisecond left: the record goes with the key.
    redis.call('PEXPIRE', key .. ':leader', 1)
  end
end

-- Who leads, as this node sees it (leader.lua, observe.lua): 0, the key is
-- free; -1, held, but not by a leader of this election (a lock of another
-- kind on the name); {token, pttl, identity, value, term, seq}, held by
-- the leader `token`, its key living `pttl` ms more, and its record
-- (identity false when the record is not this leader's: it has not been
-- announced here); or the error of a key that is no lock.
local function leader_of(key)
  local layout, id = look(key, true)
  if layout == nil then
    return id
  elseif not layout then
    return 0
  elseif layout ~= 'exclusive' then
    return -1
  end
  local pttl = redis.call('PTTL', key)
  local t, n, v, f, s = unpack(redis.call('HMGET', key .. ':leader', 't', 'n', 'v', 'f', 's'))
  if t ~= id then
    return {id, pttl, false, false, false, false}
  end
  return {id, pttl, n, v, f, s}
end
