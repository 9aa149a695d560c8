-- Acquire a non-reentrant lock (Redisson 4.4+ NonReentrantLock semantics):
-- RLock's acquire, except that an owner that already holds the lock is
-- refused with an error reply instead of re-entering.
-- KEYS[1] lock hash
-- ARGV[1] lease in ms, ARGV[2] owner field "<client-id>:<owner-id>",
-- ARGV[3] the refusal's text (NON_REENTRANT_REACQUIRE, as Redisson sends it)
-- Reply: nil when the lock is now held by ARGV[2] (hold count 1, TTL set to
-- the lease); an error reply ARGV[3] when ARGV[2] holds it already (nothing
-- is written); otherwise the lock's remaining TTL in ms (PTTL).
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[3])
end
return redis.call('pttl', KEYS[1])
