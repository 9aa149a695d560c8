-- Set the count if the latch does not exist yet (Redisson's
-- RCountDownLatch.trySetCount), and publish 1 (a new count) so that JVM
-- waiters of an earlier round close their local latch and wait again.
-- KEYS[1] latch (string), KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] count, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] request latch TTL in ms
-- Reply: 1 set, 0 it existed.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local set = 0
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], 1)
    set = 1
end
redis.call('set', KEYS[3], set, 'px', ARGV[3])
return set
