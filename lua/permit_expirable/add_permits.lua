-- Add ARGV[1] permits (negative to take some away) and announce how many
-- were added when positive (Redisson's RPermitExpirableSemaphore.addPermits,
-- which publishes the number added, not the total).
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] permits to add, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] request latch
-- TTL in ms
-- Reply: the new number available; nil refused: it would leave the Java int
-- range.
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
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
redis.call('set', KEYS[3], total, 'px', ARGV[3])
return total
