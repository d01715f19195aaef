-- The waiters' queue of a lock key, shared by every kind's scripts (this
-- text comes after keyspace.lua and before theirs). A waiter is '<since>:<client id>:<wait id>',
-- <since> the time its wait began (16 digits); the queue of <key> is the
-- sorted set <key>:waiters, every score 0, so in the order of the names:
-- by <since>, the same on every node. A release wakes the first waiter of
-- the queue that still listens, on its client's channel
-- <key>:wake:<client id>.

-- How long a queue outlives the holder its last waiter saw, in ms: its
-- waiters come back within that (they sleep no longer than the holder's
-- PTTL) unless they are gone.
local QUEUE_SLACK = 5000

-- Puts `member` in `key`'s queue, in its place, and keeps the queue for at
-- least `life` ms (at most keyspace.lua's LONGEST). A queue without an
-- expiry (PTTL -1: none of ours) gets one.
local function enqueue(key, member, life)
  local queue = key .. ':waiters'
  redis.call('ZADD', queue, 'NX', 0, member)
  if redis.call('PTTL', queue) < math.min(life, LONGEST) then
    redis.call('PEXPIRE', queue, lifespan(life))
  end
end

-- The writer whose intent turns `key`'s new readers away (see `refuse`),
-- or false. Only a string in a waiter's form counts: a key of another use
-- under that name (a lock named `x:intent`) is not an intent.
local function intent_of(key)
  local intent = key .. ':intent'
  -- (EXISTS first: there is rarely one, and a GET is the lock key's read.)
  if redis.call('EXISTS', intent) == 0 then
    return false
  end
  local v = redis.pcall('GET', intent)
  if type(v) == 'string' and string.match(v, '^%d+:%x+:%d+$') then
    return v
  end
  return false
end

-- Whether a waiter of `key` could get in now: the key has room by its
-- layout (keyspace.lua's `room`: free, a semaphore's free slot, readers),
-- and for readers, no writer's intent turns new ones away (see `refuse`).
-- A pass-on and a leave wake the next waiter when it is so: whenever the
-- lock has room, not only when the key is gone (a semaphore with a free
-- slot, or readers, still have theirs).
local function vacant(key)
  local has = room(key)
  if has == 'readers' then
    return not intent_of(key)
  end
  return has
end

-- Takes `member` out of `key`'s queue (it got the lock, or stopped
-- waiting), and its intent with it (see `refuse`): true if it had one.
local function dequeue(key, member)
  redis.call('ZREM', key .. ':waiters', member)
  if intent_of(key) == member then
    redis.call('DEL', key .. ':intent')
    return true
  end
  return false
end

-- Whether `channel` has a subscriber of its own: PUBLISH also counts
-- pattern subscribers (a monitoring tool's PSUBSCRIBE *), which hear every
-- channel and wake nobody. True where the node refuses PUBSUB (an ACL):
-- then PUBLISH's count decides alone.
local function subscribed(channel)
  local subscribers = redis.pcall('PUBSUB', 'NUMSUB', channel)
  return subscribers.err ~= nil or subscribers[2] > 0
end

-- Whether this node is one of a Redis Cluster's. There `PUBSUB NUMSUB`
-- and `PUBLISH`'s reply count the subscribers of this node only, while a
-- `PUBLISH` reaches those of every node (a waiter's client subscribes on
-- one node of the cluster, not necessarily this one): whether anyone
-- listens cannot be told, and a waiter is taken as listening. If its
-- client is gone, the turn is lost until the next waiter's timer (a
-- delay, as for a wake-up a pattern subscriber counted).
local function clustered()
  local info = redis.pcall('INFO', 'cluster')
  return type(info) == 'string' and string.find(info, 'cluster_enabled:1', 1, true) ~= nil
end

-- Takes `member` out of `key`'s queue and publishes '<member> <token>' on
-- its client's channel; `cluster` says whether this node is a cluster's
-- (see `clustered`). 'heard', 'refused' (an ACL refused the PUBLISH) or
-- 'nobody' (its client gone, or no longer subscribed).
local function notify(key, member, token, cluster)
  redis.call('ZREM', key .. ':waiters', member)
  local client = string.match(member, '^[^:]*:([^:]*):') or ''
  local channel = key .. ':wake:' .. client
  if not cluster and not subscribed(channel) then
    return 'nobody'
  end
  local heard = redis.pcall('PUBLISH', channel, member .. ' ' .. token)
  if type(heard) == 'table' then
    return 'refused'
  end
  return (cluster or heard > 0) and 'heard' or 'nobody'
end

-- Wakes the first waiter of `key`'s queue whose client listens, with
-- `token` (the holder that let go), and takes it out of the queue; a
-- waiter nobody hears is taken out and the next one tried. A woken waiter
-- that does not get the lock queues again, in its place. A writer whose
-- intent turns new readers away (see `refuse`) is woken first: the
-- readers queued before it could not get in anyway. False if the node
-- refused the PUBLISH (an ACL), else true.
local function wake(key, token)
  local queue = key .. ':waiters'
  local intent = intent_of(key)
  -- Asked once per wake-up, when a first waiter is tried.
  local cluster
  if intent and redis.call('ZSCORE', queue, intent) then
    cluster = clustered()
    local outcome = notify(key, intent, token, cluster)
    if outcome ~= 'nobody' then
      return outcome == 'heard'
    end
  end
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then
      return true
    end
    if cluster == nil then
      cluster = clustered()
    end
    local outcome = notify(key, first, token, cluster)
    if outcome ~= 'nobody' then
      return outcome == 'heard'
    end
  end
end


-- The reply of an attempt that found `key` held (`layout`, `id`, `token`:
-- what `look` said of it): 0, or for a `waiter` {the name waiters wait for
-- (keyspace.lua's `waited_for`), the key's PTTL}, and the waiter queues for
-- the key. A waiter kept out by readers (a writer: readers are
-- not refused by readers) also leaves an intent, `<key>:intent` = its name, unless another's is
-- there: new readers are turned away while it lives (see kinds/rwlock).
-- It lives a second past the readers' latest PTTL, ten seconds at most,
-- and each attempt of its writer renews it: a writer that dies lets
-- readers in again within that. The writer is told a PTTL no longer than
-- its intent's life less a second, so that it is back (to renew it)
-- before it lapses, however long its retry delay.
local function refuse(key, waiter, layout, id, token)
  if waiter == '' then
    return 0
  end
  token = waited_for(key, layout, id, token)
  local pttl = redis.call('PTTL', key)
  enqueue(key, waiter, math.max(pttl, 0) + QUEUE_SLACK)
  if layout == 'readers' then
    local intent = key .. ':intent'
    local life = math.min(math.max(pttl, 0), 10000) + 1000
    local current = intent_of(key)
    if current == waiter then
      redis.call('PEXPIRE', intent, lifespan(life))
    elseif redis.call('EXISTS', intent) == 0 then
      redis.call('SET', intent, waiter, 'PX', lifespan(life))
    end
    pttl = math.min(pttl, life - 1000)
  end
  return {token, pttl}
end

-- Lets the hold `hold` of `key` go (see keyspace.lua's `remove`); when
-- that frees what a waiter could take (the key, or a semaphore's slot) and
-- `announce`, wakes its first waiter with the token waiters saw. 0: no such
-- hold; 1: let go; 2: let go and freed, but the wake-up refused (an ACL).
local function let_go(key, layout, id, token, hold, announce)
  local freed = remove(key, layout, id, token, hold)
  if freed == nil then
    return 0
  elseif freed and announce and not wake(key, freed) then
    return 2
  end
  return 1
end
