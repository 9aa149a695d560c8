-- Delete the latch (Redisson's delete) and publish 1, a new round: JVM
-- waiters keep waiting for a count that a later trySetCount sets.
-- KEYS[1] latch, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] PUBLISH or SPUBLISH, ARGV[2] request latch TTL in ms
-- Reply: 1 deleted, 0 there was none.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
    redis.call(ARGV[1], KEYS[2], 1)
end
redis.call('set', KEYS[3], deleted, 'px', ARGV[2])
return deleted
