-- Who leads, as this node sees it. KEYS[1] = the key.
-- 0: the key is free; -1: held, but not by a leader of this election (a
-- lock of another kind on the name); {token, pttl, identity, value, term,
-- seq}: held by the leader `token`, its key living `pttl` ms more, and its
-- record (identity false when the record is not this leader's: it has not
-- been announced here).
local layout, id = look(KEYS[1], true)
if layout == nil then
  return id
elseif not layout then
  return 0
elseif layout ~= 'exclusive' then
  return -1
end
local pttl = redis.call('PTTL', KEYS[1])
local t, n, v, f, s = unpack(redis.call('HMGET', KEYS[1] .. ':leader', 't', 'n', 'v', 'f', 's'))
if t ~= id then
  return {id, pttl, false, false, false, false}
end
return {id, pttl, n, v, f, s}
