-- Compare-and-delete. KEYS[1] = key, ARGV[1] = our token, ARGV[2] = '1' to
-- announce the release on <key>:released (waiters listen there).
-- 1: deleted; 2: deleted, but PUBLISH was refused (an ACL); 0: no key;
-- -1: another owner's key, left alone.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then
    local r = redis.pcall('PUBLISH', KEYS[1] .. ':released', ARGV[1])
    if type(r) == 'table' and r.err then
      return 2
    end
  end
  return 1
elseif v then
  return -1
end
return 0
