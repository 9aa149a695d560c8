-- Acquire a non-reentrant fair lock, or join (or keep) a place in its queue
-- (Redisson 4.4+ NonReentrantFairLock lock() / tryLock(wait)): the fair
-- acquire, except that an owner that already holds the lock is refused with
-- an error reply instead of re-entering.
-- KEYS[1] lock hash, KEYS[2] waiting queue (list), KEYS[3] waiter deadlines (sorted set)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] this waiter's wait budget
-- in ms, ARGV[4] now (wall clock, ms), ARGV[5] the refusal's text
-- (NON_REENTRANT_REACQUIRE, as Redisson sends it)
-- Reply: nil acquired; an error reply ARGV[5] when ARGV[2] holds it already
-- (nothing is written); otherwise how long to wait (ms), as acquire.lua.

-- (prelude.lua is prepended.)
local now = tonumber(ARGV[4])
purge_expired(KEYS[2], KEYS[3], now)
if take(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], ARGV[3]) then
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[5])
end
return wait_in_line(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], now)
