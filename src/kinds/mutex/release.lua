-- Compare-and-delete. KEYS = the lock's keys, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the first waiter of each key released (see
-- queue.lua). Deletes every key that holds our token, and only those.
-- 1: every key was ours and is deleted; 2: the same, but a wake-up was
-- refused (an ACL); 0: some key was missing (none another holder's);
-- -1: some key is another holder's, of any kind, left alone. A key that is
-- no lock is its WRONGTYPE error, before anything is deleted.
local ours, missing, held, refused = {}, false, false, false
for _, key in ipairs(KEYS) do
  local layout, id = look(key, true)
  if layout == nil then
    return id
  elseif layout == 'exclusive' and id == ARGV[1] then
    ours[#ours + 1] = key
  elseif layout then
    held = true
  else
    missing = true
  end
end
for _, key in ipairs(ours) do
  if let_go(key, 'exclusive', ARGV[1], ARGV[1], ARGV[1], ARGV[2] == '1') == 2 then
    refused = true
  end
end
if held then
  return -1
elseif missing then
  return 0
elseif refused then
  return 2
end
return 1
