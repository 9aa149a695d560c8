-- Release one hold of a lock (Redisson RLock semantics, with the unlock latch).
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] unlock latch of this request
-- ARGV[1] unlock message, ARGV[2] lease in ms applied while still held,
-- ARGV[3] owner field, ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL in ms
-- Reply: 1 released, 0 still held (hold count - 1), nil not held by ARGV[3].
-- A retry with the same latch key replays the first reply instead of running twice.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
