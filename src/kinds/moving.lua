-- A Redis Cluster slot halfway through a move: run first, before anything
-- is written, in every script that reaches a side key (keyspace.rs's
-- `script!`: those with the queue, and `script!(keys sides …)`).
--
-- While a slot moves, the primary it leaves (MIGRATING) runs a script only
-- if all its declared KEYS are there, and the script then stops with an
-- error at the first call on a key that is not ('non local key' on Redis
-- 6.2 and 7.0; 'rehashing' where some of a call's keys are and some are
-- not, on later versions). Our scripts also reach keys built from their
-- KEYS (`<key>:waiters`, `:intent`, `:leader`, `:terms`, in the key's
-- slot), often after they wrote: a release stopped at `:intent` had
-- deleted the key, and its rerun answered "no key". So every such key is
-- touched here first, with `pcall`: if the slot is moving away under one
-- of them, the script answers TRYAGAIN, as Redis does for a command whose
-- declared keys are split, having written nothing, and the client sends
-- it again once the move ends (net/topology/cluster.rs). Anywhere else
-- this is one EXISTS (one per 100 keys), its answer unused; any other
-- error it meets (an ACL that keeps this user from a side key it never
-- uses) is left to the call that would meet it. Scripts that reach no
-- side key (the extensions, `inspect`, the fenced lock's confirmation)
-- go without it: they still run on the primary the slot leaves while
-- their keys are there.
do
  local sides = {}
  local function probe()
    local seen = redis.pcall('EXISTS', unpack(sides))
    sides = {}
    return type(seen) == 'table' and seen.err
      and (string.find(seen.err, 'non local key', 1, true)
        or string.find(seen.err, 'rehashing', 1, true))
  end
  for i, key in ipairs(KEYS) do
    sides[#sides + 1] = key .. ':waiters'
    sides[#sides + 1] = key .. ':intent'
    sides[#sides + 1] = key .. ':leader'
    sides[#sides + 1] = key .. ':terms'
    -- At most 400 keys a call: Lua 5.1's `unpack` fails past about 8 000
    -- values, and a lock may have thousands of keys.
    if (#sides >= 400 or i == #KEYS) and probe() then
      return redis.error_reply('TRYAGAIN the slot of ' .. KEYS[1] .. ' is moving')
    end
  end
end
