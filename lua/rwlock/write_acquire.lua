-- Take the write hold (Redisson WriteLock semantics): free, or re-entered by
-- the writer. A reader cannot upgrade.
-- KEYS[1] lock hash
-- ARGV[1] lease in ms, ARGV[2] writer field (<client-id>:<owner-id>:write)
-- Reply: nil acquired; otherwise the lock's PTTL. A re-entry adds the lease
-- to the remaining TTL, as Redisson does.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local remaining = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], remaining + tonumber(ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])
