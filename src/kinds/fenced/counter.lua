-- The fencing counter `key`, checked before anything is written: a whole
-- number from 0 below 2^53, where Lua's doubles (exact up to there) stop
-- counting. Lua 5.1's tonumber also reads 'nan', 'inf', '-5' and '1.5'; a
-- NaN fails every comparison and survives math.max, so it is told by
-- n ~= n. Nothing but a string holding such a number is a counter (a key of
-- another type reads as an error table, which tonumber makes nil).
-- The counter (0 when absent); or nil and the error BADFENCE <key> to
-- return, nothing changed.
local function fence_counter(key)
  local c = tonumber(redis.pcall('GET', key) or '0')
  if not c or c ~= c or c < 0 or c >= 9007199254740992 or math.floor(c) ~= c then
    return nil, redis.error_reply('BADFENCE ' .. key)
  end
  return c
end


-- Raises the counter `key` to `to` (never lowers it): true; or nil and the
-- error BADFENCE to return (see fence_counter), nothing changed.
local function raise_fence(key, to)
  local c, bad = fence_counter(key)
  if not c then
    return nil, bad
  end
  if c < tonumber(to) then
    redis.call('SET', key, to)
  end
  return true
end
