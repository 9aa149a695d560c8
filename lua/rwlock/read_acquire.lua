-- Take a read hold (Redisson ReadLock semantics): free, already read-locked,
-- or write-locked by this owner itself (a downgrade).
-- KEYS[1] lock hash, KEYS[2] this reader's timeout-key prefix
--   ({name}:<field>:rwlock_timeout); hold n has its own key KEYS[2]:n
-- ARGV[1] lease in ms, ARGV[2] reader field, ARGV[3] the same owner's writer field
-- Reply: nil acquired (hold count + 1, hold key set with the lease);
-- otherwise the lock's PTTL.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local hold = KEYS[2] .. ':' .. n
    redis.call('set', hold, 1)
    redis.call('pexpire', hold, ARGV[1])
    -- The lock lives as long as its longest hold.
    local remaining = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(remaining, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
