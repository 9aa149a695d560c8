-- Add ARGV[1] permits (negative to take some away) and announce the new
-- total when it is positive (Redisson's addPermits, which publishes even a
-- negative total; a JVM waiter's listener throws on that, so none is sent).
-- Like Redisson, the SET drops the key's TTL.
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] permits to add, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] latch TTL in ms
-- Reply: the new total; nil refused: it would leave -2147483648..2147483647,
-- which a JVM client cannot read.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local value = redis.call('get', KEYS[1])
if value == false then
    value = 0
end
local total = tonumber(value) + tonumber(ARGV[1])
if total > 2147483647 or total < -2147483648 then
    return nil
end
redis.call('set', KEYS[1], total)
if total > 0 then
    redis.call(ARGV[2], KEYS[2], total)
end
redis.call('set', KEYS[3], total, 'px', ARGV[3])
return total
