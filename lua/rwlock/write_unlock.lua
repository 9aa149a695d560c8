-- Release one write hold (Redisson WriteLock semantics, with the unlock latch).
-- KEYS[1] lock hash, KEYS[2] channel, KEYS[3] unlock latch
-- ARGV[1] message (1: wakes every waiter), ARGV[2] lease in ms while still
-- held, ARGV[3] writer field, ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL in ms
-- Reply: 1 the write hold is gone, 0 still held, nil not held by ARGV[3].
-- The writer's last release frees the lock and publishes, unless the same
-- owner still reads (a downgrade: mode becomes read, nothing is published).
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
