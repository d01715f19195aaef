-- The extension's fast path (see mod.rs), before the whole script, which
-- follows as `slow` (keyspace.rs's `script!(fast …)`): with one key, the
-- common case is answered here, without the prelude's closures being made.
-- Every answer given here is the one `slow` gives then, with the same
-- writes: our token (a string, ARGV[1]): common.lua's `prolong` (PEXPIRE
-- only where the key has no expiry or less than ARGV[2] ms left), 1;
-- another token: -1; no key: 0. More keys, or a key that is no string
-- (GET's error reply), go to `slow` unchanged.
if #KEYS == 1 then
  local key = KEYS[1]
  local v = redis.pcall('GET', key)
  if v == ARGV[1] then
    local left = redis.call('PTTL', key)
    if left == -1 or left < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', key, ARGV[2])
    end
    return 1
  elseif not v then
    return 0
  elseif type(v) == 'string' then
    return -1
  end
end
