-- Acquire or re-enter a fenced lock (Redisson FencedLock lockAndGetToken
-- semantics): RLock's acquire, plus a fencing token that grows with every
-- acquisition, re-entries included.
-- KEYS[1] lock hash, KEYS[2] token counter (never expires)
-- ARGV[1] lease in ms, ARGV[2] owner field
-- Reply: {-1, token} when acquired; {PTTL, -1} otherwise (a PTTL of -1, a
-- key without TTL, is then told apart from a grant by the -1 token).
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}
