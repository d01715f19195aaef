-- A wake-up reached a client whose named wait had ended (see queue.rs's
-- `pass_on`). KEYS[1] = the key, ARGV[1] = the token the wake-up carried.
-- Wakes the key's next waiter if the key is free. Always 1.
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake(KEYS[1], ARGV[1])
end
return 1
