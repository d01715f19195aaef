end
-- The end of a grant's script on a cluster node with the restart guard on
-- (`cluster::watched`): the script above is the function `granted`, and
-- its reply comes back with the replication ID of the server that ran it,
-- so that the guard knows which primary granted (a new one, after a
-- failover or a failback, may lack earlier grants).
local reply = granted()
-- An error reply grants nothing: it comes back as it is.
if type(reply) == 'table' and reply.err then
  return reply
end
-- A table ends at its first nil; false is the same empty reply.
if reply == nil then
  reply = false
end
-- `INFO` refused (an ACL without it) is told, not raised: raised, it would
-- fail a script that has already written.
local info = redis.pcall('INFO', 'replication')
if type(info) ~= 'string' then
  return {reply, 'refused:' .. tostring(type(info) == 'table' and info.err or info)}
end
-- Each field is a line of its own, `\r\n` ended, read with plain
-- `string.find`: Lua patterns (`string.match`) over the 450-byte answer
-- cost the server 3.5 us a grant, plain finds 0.2 (redis-benchmark,
-- Redis 7.0, 2-core VM).
local function field(name)
  local at = string.find(info, name, 1, true)
  if not at then
    return ''
  end
  local to = string.find(info, '\r', at + #name, true) or (#info + 1)
  return string.sub(info, at + #name, to - 1)
end
-- Only a primary's answer names it: a replica reports its primary's ID.
local role = field('\nrole:')
if role ~= 'master' then
  return {reply, 'role:' .. role}
end
-- A replication ID is hex digits: neither prefix above can be one.
return {reply, field('\nmaster_replid:')}
