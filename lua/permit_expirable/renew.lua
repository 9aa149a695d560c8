-- Move the leases of a guard's permits to one new deadline (Redisson's
-- updateLeaseTime for each id, in one script), after returning expired
-- leases to the pool, as every script of this object does. Running it
-- twice sets the same deadline.
-- KEYS[1] semaphore, KEYS[2] leases, KEYS[3] channel
-- ARGV[1] new deadline in ms, ARGV[2] now in ms, ARGV[3] PUBLISH or
-- SPUBLISH, ARGV[4..] permit ids (16 raw bytes each)
-- Reply: how many were still leased (and moved).
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[2], 'limit', 0, -1)
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local total = redis.call('incrby', KEYS[1], #expired)
    if total > 0 then
        redis.call(ARGV[3], KEYS[3], total)
    end
end
local moved = 0
for i = 4, #ARGV do
    if redis.call('zscore', KEYS[2], ARGV[i]) ~= false then
        redis.call('zadd', KEYS[2], ARGV[1], ARGV[i])
        moved = moved + 1
    end
end
return moved
