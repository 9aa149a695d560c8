-- One try at a non-reentrant fair lock without joining its queue (Redisson
-- 4.4+ NonReentrantFairLock tryLock()).
-- KEYS[1] lock hash, KEYS[2] waiting queue (list), KEYS[3] waiter deadlines (sorted set)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] now (wall clock, ms),
-- ARGV[4] the wait budget (ms) the queue's deadlines are counted with,
-- ARGV[5] the refusal's text (NON_REENTRANT_REACQUIRE)
-- Reply: nil acquired; an error reply ARGV[5] when ARGV[2] holds it already
-- (nothing is written); 1 not acquired (not queued either).
-- (prelude.lua is prepended.)
purge_expired(KEYS[2], KEYS[3], tonumber(ARGV[3]))
if take(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], ARGV[4]) then
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[5])
end
return 1
