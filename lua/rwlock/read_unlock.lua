-- Release one read hold (Redisson ReadLock semantics, with the unlock latch).
-- KEYS[1] lock hash, KEYS[2] channel, KEYS[3] this reader's timeout-key prefix,
-- KEYS[4] the prefix of every reader's timeout keys ({name}), KEYS[5] unlock latch
-- ARGV[1] unlock message (0), ARGV[2] reader field, ARGV[3] PUBLISH or SPUBLISH,
-- ARGV[4] latch TTL in ms
-- Reply: 1 the lock is free, 0 still held (by anyone), nil not held by ARGV[2].
-- A retry with the same latch key replays the first reply.
local replay = redis.call('get', KEYS[5])
if replay then
    return tonumber(replay)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    redis.call('set', KEYS[5], 1, 'px', ARGV[4])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    -- Others still hold it: it lives as long as their longest read hold.
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local count = tonumber(redis.call('hget', KEYS[1], field))
        if count then
            for n = count, 1, -1 do
                local ttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. n)
                longest = math.max(ttl, longest)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
