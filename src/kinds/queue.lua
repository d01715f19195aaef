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
-- least `life` ms.
local function enqueue(key, member, life)
  local queue = key .. ':waiters'
  redis.call('ZADD', queue, 'NX', 0, member)
  if redis.call('PTTL', queue) < life then
    redis.call('PEXPIRE', queue, life)
  end
end

-- Takes `member` out of `key`'s queue (it got the lock, or stopped waiting).
local function dequeue(key, member)
  redis.call('ZREM', key .. ':waiters', member)
end

-- Whether `channel` has a subscriber of its own: PUBLISH also counts
-- pattern subscribers (a monitoring tool's PSUBSCRIBE *), which hear every
-- channel and wake nobody. True where the node refuses PUBSUB (an ACL):
-- then PUBLISH's count decides alone.
local function subscribed(channel)
  local subscribers = redis.pcall('PUBSUB', 'NUMSUB', channel)
  return subscribers.err ~= nil or subscribers[2] > 0
end

-- Wakes the first waiter of `key`'s queue whose client listens: publishes
-- '<member> <token>' (`token`: the holder that let go) on its client's
-- channel, and takes it out of the queue; a waiter nobody hears (its
-- client gone, or no longer subscribed) is taken out and the next one
-- tried. A woken waiter that does not get the lock queues again, in its
-- place. False if the node refused the PUBLISH (an ACL), else true.
local function wake(key, token)
  local queue = key .. ':waiters'
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then
      return true
    end
    redis.call('ZREM', queue, first)
    local client = string.match(first, '^[^:]*:([^:]*):') or ''
    local channel = key .. ':wake:' .. client
    if subscribed(channel) then
      local heard = redis.pcall('PUBLISH', channel, first .. ' ' .. token)
      if type(heard) == 'table' then
        return false
      end
      if heard > 0 then
        return true
      end
    end
  end
end


-- The reply of an attempt that found `key` held, waiters waiting for
-- `token`: 0, or for a `waiter` {token, the key's PTTL}, and the waiter
-- queues for the key.
local function refuse(key, token, waiter)
  if waiter == '' then
    return 0
  end
  local pttl = redis.call('PTTL', key)
  enqueue(key, waiter, math.max(pttl, 0) + QUEUE_SLACK)
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
