-- Whether any value of a group multi lock is held, by anyone (Redisson's
-- RedissonFasterMultiLock isLocked).
-- KEYS[1] the group hash
-- ARGV[1] now (wall clock, ms), ARGV[2..] the values' field ids
-- Reply: 1 or 0.
local now = tonumber(ARGV[1])
for i = 2, #ARGV do
    local holder = redis.call('hget', KEYS[1], ARGV[i])
    if holder then
        local ends = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time'))
        if ends and ends >= now then
            return 1
        end
    end
end
return 0
