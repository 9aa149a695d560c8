-- Take every available permit (Redisson's drainPermits; like Redisson, the
-- SET drops the key's TTL).
-- KEYS[1] semaphore, KEYS[2] request latch
-- ARGV[1] latch TTL in ms
-- Reply: the permits taken (what was available; 0 without a semaphore).
local replay = redis.call('get', KEYS[2])
if replay then
    return tonumber(replay)
end
local value = redis.call('get', KEYS[1])
if value == false then
    value = 0
else
    redis.call('set', KEYS[1], 0)
end
redis.call('set', KEYS[2], value, 'px', ARGV[1])
return tonumber(value)
