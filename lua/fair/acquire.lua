-- Acquire a fair lock, or join (or keep) a place in its queue (Redisson
-- FairLock lock() / tryLock(wait)).
-- KEYS[1] lock hash, KEYS[2] waiting queue (list), KEYS[3] waiter deadlines (sorted set)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] this waiter's wait budget
-- in ms, ARGV[4] now (wall clock, ms)
-- Reply: nil acquired (or re-entered); otherwise how long to wait (ms) before
-- trying again: for a queued waiter the lock's PTTL (0 when it is free but
-- someone else is first in line), for a new one the time until the waiter
-- before it gives up.

-- (prelude.lua is prepended.)
local now = tonumber(ARGV[4])
purge_expired(KEYS[2], KEYS[3], now)
if take_or_reenter(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], ARGV[3]) then
    return nil
end
return wait_in_line(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], now)
