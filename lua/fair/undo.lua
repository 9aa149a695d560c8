-- Takes back one acquisition of a fair lock that the replicas did not confirm,
-- keeping the owner's place: nobody is told (the lock was never really free
-- for the next in line), and a waiter that took the lock off the head of the
-- queue goes back to its head, the deadlines behind it as they were before.
-- KEYS[1] lock hash, KEYS[2] waiting queue, KEYS[3] waiter deadlines,
-- KEYS[4] unlock latch
-- ARGV[1] owner field, ARGV[2] lease in ms while still held, ARGV[3] the
-- waiter's wait budget in ms (0: a single try, which never queued),
-- ARGV[4] now (wall clock, ms), ARGV[5] latch TTL in ms
-- Reply: 1 taken back (the lock is free, its owner first in line), 0 still
-- held (one hold fewer), nil not held by ARGV[1].
local replay = redis.call('get', KEYS[4])
if replay then
    return tonumber(replay)
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[4], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
local wait = tonumber(ARGV[3])
if wait > 0 and redis.call('zscore', KEYS[3], ARGV[1]) == false then
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], wait, waiter)
    end
    redis.call('lpush', KEYS[2], ARGV[1])
    redis.call('zadd', KEYS[3], tonumber(ARGV[4]) + wait, ARGV[1])
end
redis.call('set', KEYS[4], 1, 'px', ARGV[5])
return 1
