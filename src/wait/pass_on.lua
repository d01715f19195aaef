-- A wake-up reached a client whose named wait had ended (see queue.rs's
-- `pass_on`). KEYS[1] = the key, ARGV[1] = the token the wake-up carried.
-- Wakes the key's next waiter if the lock has room for it (`vacant`: free,
-- a semaphore's free slot, readers no intent keeps others from). Always 1.
if vacant(KEYS[1]) then
  wake(KEYS[1], ARGV[1])
end
return 1
