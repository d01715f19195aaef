-- A waiter leaves (see queue.rs's `leave`): it stopped waiting without the
-- lock. KEYS = the keys it waited for, ARGV[1] = its name in their queues.
-- Takes it out of each key's queue, and its intent with it; wakes the next
-- waiter wherever the lock has room for it (`vacant`: free, a semaphore's
-- free slot, readers that its intent no longer keeps others from): the
-- leaver may have been woken for that room, and would take the turn away
-- with it. Always 1.
for _, key in ipairs(KEYS) do
  dequeue(key, ARGV[1])
  if vacant(key) then
    wake(key, 'leave:' .. ARGV[1])
  end
end
return 1
