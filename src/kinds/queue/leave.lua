-- A waiter leaves (see queue.rs's `leave`): it stopped waiting without the
-- lock. KEYS = the keys it waited for, ARGV[1] = its name in their queues.
-- Takes it out of each key's queue, and its intent with it; wakes the next
-- waiter where the key is free, or held by readers whom the intent was
-- keeping others from. Always 1.
for _, key in ipairs(KEYS) do
  local dropped = dequeue(key, ARGV[1])
  if redis.call('EXISTS', key) == 0 or (dropped and look(key) == 'readers') then
    wake(key, 'leave:' .. ARGV[1])
  end
end
return 1
