-- Delete a spin lock whoever holds it (Redisson SpinLock forceUnlock: no message).
-- KEYS[1] lock hash
-- Reply: 1 a lock was deleted, 0 there was none.
-- Unlike Redisson, a key that is not a hash is refused rather than deleted.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
return redis.call('del', KEYS[1])
