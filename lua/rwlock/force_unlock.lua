-- Delete a read-write lock held in the given mode, whoever holds it, and wake
-- its waiters (Redisson's forceUnlock of the read or the write lock).
-- KEYS[1] lock hash, KEYS[2] channel
-- ARGV[1] the mode (read or write), ARGV[2] message (0 read, 1 write),
-- ARGV[3] PUBLISH or SPUBLISH,
-- ARGV[4] (optional) a holder's field: delete only while it is in the lock
-- Reply: 1 deleted, 0 not held in that mode (or not by that holder). A key of
-- another type is refused.
-- Readers' timeout keys are left to expire, as in Redisson.
if ARGV[4] and redis.call('hexists', KEYS[1], ARGV[4]) == 0 then
    return 0
end
if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], ARGV[2])
    return 1
end
return 0
