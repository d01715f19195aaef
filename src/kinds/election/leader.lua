-- Who leads, as this node sees it (record.lua's leader_of). KEYS[1] = the
-- key.
return leader_of(KEYS[1])
