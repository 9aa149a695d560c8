-- Release one hold of a spin lock (Redisson SpinLock semantics, with the
-- unlock latch): RLock's unlock without the message, since spin-lock
-- waiters poll.
-- KEYS[1] lock hash, KEYS[2] unlock latch of this request
-- ARGV[1] lease in ms applied while still held, ARGV[2] owner field, ARGV[3] latch TTL in ms
-- Reply: 1 released, 0 still held (hold count - 1), nil not held by ARGV[2].
local replay = redis.call('get', KEYS[2])
if replay then
    return tonumber(replay)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 0, 'px', ARGV[3])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], 1, 'px', ARGV[3])
return 1
