-- Whether a read-write lock is read-locked (Redisson ReadLock.isLocked): in
-- read mode, or write mode with a reader besides the writer (a downgrade).
-- KEYS[1] lock hash. Reply: 1 or 0.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then
    return 1
end
return 0
