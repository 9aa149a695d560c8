-- Delete a lock whoever holds it, and wake its waiters (Redisson forceUnlock).
-- KEYS[1] lock hash, KEYS[2] unlock channel
-- ARGV[1] unlock message, ARGV[2] PUBLISH or SPUBLISH,
-- ARGV[3] (optional) a holder's field: delete only while it is in the lock
-- Reply: 1 a lock was deleted, 0 there was none (or not that holder's).
-- Unlike Redisson, a key that is not a hash is refused rather than deleted.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if ARGV[3] and redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return 0
end
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
