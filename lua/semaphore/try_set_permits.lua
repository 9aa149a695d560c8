-- Set the number of permits if the semaphore does not exist yet (Redisson's
-- trySetPermits, also the permit-expirable semaphore's), optionally with a
-- TTL, and announce it.
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] permits, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] latch TTL in ms,
-- ARGV[4] the semaphore's TTL in ms, 0 for none
-- Reply: 1 set, 0 it existed.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local set = 0
if redis.call('get', KEYS[1]) == false then
    if ARGV[4] ~= '0' then
        redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[4])
    else
        redis.call('set', KEYS[1], ARGV[1])
    end
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    set = 1
end
redis.call('set', KEYS[3], set, 'px', ARGV[3])
return set
