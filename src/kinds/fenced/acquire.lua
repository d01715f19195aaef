-- Takes the key and draws the next fencing token, atomically.
-- KEYS[1] = the key, KEYS[2] = its counter (no TTL), ARGV[1] = our token,
-- ARGV[2] = TTL in milliseconds, ARGV[3] = the waiter ('' for none): it is
-- told who holds the key we could not take, and queues for it (see
-- queue.lua), ARGV[4] = the floor: the least the counter may become (our
-- wall clock in microseconds; '0' without the time floor). The key is the
-- exclusive layout (mutex/layout.lua).
-- {n}: the key is ours, and the counter was raised to n = max(counter + 1,
-- floor) in the same step (also when run twice: then the counter as it is);
-- 0: another holder's key, of any kind, nothing changed; {holder, pttl}:
-- the same, with the holder's token (false if unknown);
-- error BADFENCE: the counter is not one (counter.lua), nothing changed.
local layout, id, holder = look(KEYS[1], true)
if layout == nil then
  return id
end
-- The counter, checked before anything is written (counter.lua).
local c, bad = fence_counter(KEYS[2])
if not c then
  return bad
end
if layout == 'exclusive' and id == ARGV[1] then
  return {c}
elseif layout then
  return refuse(KEYS[1], ARGV[3], layout, id, holder)
end
-- The next token (`whole` writes it without an exponent). Beyond 2^53 a
-- counter would stop growing: refused, before anything is written.
local n = math.max(c + 1, tonumber(ARGV[4]))
if n >= 9007199254740992 then
  return redis.error_reply('FENCEMAX the fencing counter ' .. KEYS[2] .. ' cannot grow past 2^53')
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], whole(n))
if ARGV[3] ~= '' then
  dequeue(KEYS[1], ARGV[3])
end
return {n}
