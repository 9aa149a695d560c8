-- What an acquire whose reply was lost left, read in one step (two reads
-- could reach two nodes across a reconnect): the lock's TTL, its fencing
-- token, and the owner's count fields. When the owner holds a count there,
-- its TTL is set again to what is left of it: a write the replicas must
-- acknowledge, so the WAIT that follows on this connection covers whatever
-- the primary had before it (the lost acquire and its token included), even
-- on a connection made after the one the acquire went out on.
-- KEYS[1] the lock, KEYS[2] its token key (KEYS[1] again when it has none)
-- ARGV the owner's count fields
-- Reply: {pttl, token or nil, each field's value or nil}
local pttl = redis.call('pttl', KEYS[1])
local token = false
if KEYS[2] ~= KEYS[1] then
    token = redis.call('get', KEYS[2])
end
local out = {pttl, token}
local owned = false
for i = 1, #ARGV do
    local value = redis.call('hget', KEYS[1], ARGV[i])
    out[i + 2] = value
    owned = owned or value ~= false
end
if owned and pttl > 0 then
    redis.call('pexpire', KEYS[1], pttl)
end
return out
