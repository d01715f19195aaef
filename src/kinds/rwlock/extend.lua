-- Prolongs our reader's share. KEYS[1] = the key, ARGV[1] = our token,
-- ARGV[2] = TTL in milliseconds. Only while our share is held; never
-- creates it, never shortens it.
-- 1: our share lives at least ARGV[2] ms from now; 0: it is not held here;
-- -1: a writer (or another kind) holds the key.
local key, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local _, reply = mine(key, 'readers')
if reply then
  return reply
end
local now = now_ms()
local ours = tonumber(redis.call('HGET', key, token))
if not ours or ours <= now then
  return 0
end
if ours < now + ttl then
  redis.call('HSET', key, token, whole(now + ttl))
end
prolong(key, ttl, ARGV[2])
return 1
