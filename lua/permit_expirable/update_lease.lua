-- Move a leased permit's deadline (Redisson's updateLeaseTime), after
-- returning expired leases to the pool. Running it twice sets the same
-- deadline.
-- KEYS[1] semaphore, KEYS[2] leases, KEYS[3] channel
-- ARGV[1] permit id (16 raw bytes), ARGV[2] new deadline in ms, ARGV[3] now
-- in ms, ARGV[4] PUBLISH or SPUBLISH
-- Reply: 1 moved, 0 no such lease (released, or expired).
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1)
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local total = redis.call('incrby', KEYS[1], #expired)
    if total > 0 then
        redis.call(ARGV[4], KEYS[3], total)
    end
end
if redis.call('zscore', KEYS[2], ARGV[1]) ~= false then
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
    return 1
end
return 0
