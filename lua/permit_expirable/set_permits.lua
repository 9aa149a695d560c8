-- Make the semaphore's size (available plus leased) ARGV[1], and announce it
-- when it changed (Redisson's setPermits). Running it twice changes nothing
-- more.
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] leases
-- ARGV[1] permits, ARGV[2] PUBLISH or SPUBLISH
-- Reply: 1.
local available = redis.call('get', KEYS[1])
if available == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
local size = redis.call('zcard', KEYS[3]) + tonumber(available)
if size ~= tonumber(ARGV[1]) then
    redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - size)
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return 1
