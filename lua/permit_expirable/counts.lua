-- Return expired leases to the pool (announcing the new total), then count
-- (Redisson's availablePermits, acquiredPermits and getPermits in one).
-- KEYS[1] semaphore, KEYS[2] leases, KEYS[3] channel
-- ARGV[1] now in ms, ARGV[2] PUBLISH or SPUBLISH
-- Reply: {1 if the semaphore exists else 0, available, leased}.
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1)
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local total = redis.call('incrby', KEYS[1], #expired)
    if total > 0 then
        redis.call(ARGV[2], KEYS[3], total)
    end
end
local available = redis.call('get', KEYS[1])
local leased = redis.call('zcard', KEYS[2])
if available == false then
    return {0, 0, leased}
end
return {1, tonumber(available), leased}
