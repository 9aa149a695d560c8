-- How long a leased permit's lease has left (Redisson's getLeaseTime), after
-- returning ended leases to the pool (announcing the new total), as every
-- script of this object does.
-- KEYS[1] semaphore, KEYS[2] leases, KEYS[3] channel
-- ARGV[1] permit id (16 raw bytes), ARGV[2] the "never" deadline, ARGV[3] now
-- in ms, ARGV[4] PUBLISH or SPUBLISH
-- Reply: the ms left (at least 1); -1 a lease that never ends; 0 no such
-- lease (released, ended, or never leased).
local ended = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1)
if #ended > 0 then
    redis.call('zrem', KEYS[2], unpack(ended))
    local total = redis.call('incrby', KEYS[1], #ended)
    if total > 0 then
        redis.call(ARGV[4], KEYS[3], total)
    end
end
local deadline = redis.call('zscore', KEYS[2], ARGV[1])
if deadline == false then
    return 0
end
if tonumber(deadline) == tonumber(ARGV[2]) then
    return -1
end
return tonumber(deadline) - tonumber(ARGV[3])
