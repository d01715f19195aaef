-- Compare-and-delete. KEYS = the lock's keys, ARGV[1] = our token,
-- ARGV[2] = '1' to wake the first waiter of each key released (see
-- queue.lua). Deletes every key that holds our token, and only those.
-- 1: every key was ours and is deleted; 2: the same, but a wake-up was
-- refused (an ACL); 0: some key was missing (none another holder's);
-- -1: some key is another holder's, of any kind, left alone.
local missing, held, refused = false, false, false
for _, key in ipairs(KEYS) do
  local layout, id = look(key)
  if layout == nil then
    return id
  elseif layout == 'exclusive' and id == ARGV[1] then
    if let_go(key, layout, id, id, id, ARGV[2] == '1') == 2 then
      refused = true
    end
  elseif layout then
    held = true
  else
    missing = true
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
