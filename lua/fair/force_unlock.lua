-- Delete a fair lock whoever holds it, and tell the first waiter in line
-- (Redisson FairLock forceUnlock).
-- KEYS[1] lock hash, KEYS[2] waiting queue, KEYS[3] waiter deadlines, KEYS[4] the lock's channel
-- ARGV[1] unlock message (0), ARGV[2] now (wall clock, ms), ARGV[3] PUBLISH or SPUBLISH,
-- ARGV[4] (optional) a holder's field: delete only while it is in the lock
-- Reply: 1 a lock was deleted, 0 there was none (or not that holder's).
-- Unlike Redisson, a key that is not a hash is refused rather than deleted.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if ARGV[4] and redis.call('hexists', KEYS[1], ARGV[4]) == 0 then
    return 0
end

-- (prelude.lua is prepended.)
purge_expired(KEYS[2], KEYS[3], tonumber(ARGV[2]))

if redis.call('del', KEYS[1]) == 1 then
    local first = redis.call('lindex', KEYS[2], 0)
    if first then
        redis.call(ARGV[3], KEYS[4] .. ':' .. first, ARGV[1])
    end
    return 1
end
return 0
