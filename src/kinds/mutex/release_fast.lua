-- The release's fast path (see mod.rs), before the whole script, which
-- follows as `slow` (keyspace.rs's `script!(fast …)`): with one key, the
-- common case is answered here, without the prelude's ~25 closures being
-- made. Every answer given here is the one `slow` gives then, with the same
-- writes:
--   our token (a string, ARGV[1]) and neither `<key>:waiters` nor
--   `<key>:intent` exists: `slow` would delete the key (the exclusive
--   layout's `remove`), find no intent and an empty queue (queue.lua's
--   `wake`), publish nothing and answer 1: so DEL, 1; the same without
--   asking when ARGV[2] is not '1' (`slow` wakes nobody then: queue.lua's
--   `let_go`);
--   another token: -1, nothing written; no key: 0, nothing written.
-- Anything else goes to `slow` unchanged: more keys, waiters or an intent
-- (`wake` has work), side keys this server cannot reach (a cluster slot
-- moving away: `slow` answers TRYAGAIN), a key that is no string (GET's
-- error reply: `slow` says which layout it is; the node counts that error,
-- so such a key costs two WRONGTYPE errors instead of one: a mutex's
-- release meets a hash only when another kind took the name after our key
-- expired).
if #KEYS == 1 then
  local key = KEYS[1]
  local v = redis.pcall('GET', key)
  if v == ARGV[1] then
    if ARGV[2] ~= '1' then
      redis.call('DEL', key)
      return 1
    end
    -- The side keys are read before anything is written, with `pcall`: on
    -- a Redis Cluster primary whose slot is moving away, reaching one
    -- that has left is an error, which goes to `slow` unchanged; `slow`
    -- runs moving.lua first, which meets it too and answers TRYAGAIN,
    -- nothing written.
    if redis.pcall('EXISTS', key .. ':waiters', key .. ':intent') == 0 then
      redis.call('DEL', key)
      return 1
    end
  elseif not v then
    return 0
  elseif type(v) == 'string' then
    return -1
  end
end
