-- Acquire or re-enter a lock (Redisson RLock semantics).
-- KEYS[1] lock hash
-- ARGV[1] lease in ms, ARGV[2] owner field "<client-id>:<owner-id>"
-- Reply: nil when the lock is now held by ARGV[2] (hold count + 1, TTL reset
-- to the lease); otherwise the lock's remaining TTL in ms (PTTL).
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
