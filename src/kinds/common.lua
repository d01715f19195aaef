-- What every layout and every script uses: numbers as Redis reads them, a
-- key's life, the node's clock. This text comes first in every script,
-- before the layouts (each kind's layout.lua) and the key space's owner
-- (keyspace.lua); see keyspace.rs.
--
-- Numbers. A Lua 5.1 number is a double, and `redis.call` hands one to
-- Redis as '%.17g' text (Redis 6.2 and 7.0): 1e17 and above in exponent
-- form ('4.6116860184273879e+18'), which PEXPIRE, PX and every other
-- integer argument refuse. So every number a script computes goes to
-- Redis through `whole` (its exact integer digits), and every life it
-- computes for a key through `lifespan` (the same, clamped to LONGEST); a
-- number given by the caller goes as given, its text. Above 2^53 a double
-- is exact only to its spacing (up to 1024 ms near MAX_TTL, about 146
-- million years): a PTTL read there, or a TTL compared with one, is off by
-- up to half of that. Rounding keeps order, so no key is ever shortened by it;
-- a key may be prolonged to up to 512 ms less than asked, far inside the
-- drift allowance the client deducts at such a TTL (1% of it).

-- The longest life, in ms, that a script gives a key it computes one for:
-- 2^62, MAX_TTL plus 1 ms. Redis refuses an expiry whose absolute time in ms
-- overflows a signed 64-bit integer; below 2^62 none does, whatever the
-- node's clock shows (until the year 146 million). A queue behind a lock
-- held near MAX_TTL lives that long: about as long as the lock key, without
-- the few seconds past it that it would have had (moot, at that age).
local LONGEST = 4611686018427387904

-- The whole number `n` as Redis reads one: its exact integer digits, never
-- an exponent (see Numbers above).
local function whole(n)
  return string.format('%.0f', n)
end

-- A key's life of `ms` milliseconds, for PEXPIRE or PX: `whole`, at most
-- LONGEST.
local function lifespan(ms)
  return whole(math.min(ms, LONGEST))
end

-- Makes `key` live at least `ttl` ms (`ms`: the same number as given, a
-- string), never shortening it: another hold, or a newer extension, may
-- count on a longer life. A key without an expiry (someone ran PERSIST)
-- gets one, not eternity.
local function prolong(key, ttl, ms)
  local left = redis.call('PTTL', key)
  if left == -1 or left < ttl then
    redis.call('PEXPIRE', key, ms)
  end
end

-- The node's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Keeps `key` exactly as long as its latest share or slot (`latest`, ms of
-- the node's clock at `now`): deleted if there is none.
local function fit_life(key, latest, now)
  if latest == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, lifespan(latest - now))
  end
end
