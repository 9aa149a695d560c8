-- Release every value of a group multi lock whoever holds them, and wake its
-- waiters (Redisson's RedissonFasterMultiLock forceUnlock).
-- KEYS[1] the group hash, KEYS[2] the group's channel
-- ARGV[1] unlock message (0), ARGV[2] PUBLISH or SPUBLISH, ARGV[3..] the
-- values' field ids
-- Reply: 1 a value was released, 0 none was held.
-- Unlike Redisson, a value nobody holds is skipped rather than an error, and
-- the reply does not depend on how many were held.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local released = 0
for i = 3, #ARGV do
    local h = ARGV[i]
    local holder = redis.call('hget', KEYS[1], h)
    if holder then
        redis.call('hdel', KEYS[1], h, h .. ':' .. holder .. ':expire_time', h .. ':' .. holder .. ':lock_count')
        released = 1
    end
end
if released == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return released
