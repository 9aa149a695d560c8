-- Delete a spin lock whoever holds it (Redisson SpinLock forceUnlock: no message).
-- KEYS[1] lock hash
-- ARGV[1] (optional) a holder's field: delete only while it is in the lock
-- Reply: 1 a lock was deleted, 0 there was none (or not that holder's).
-- Unlike Redisson, a key that is not a hash is refused rather than deleted.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if ARGV[1] and redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
return redis.call('del', KEYS[1])
