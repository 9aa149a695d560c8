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
purge_expired(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if take_or_reenter(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], ARGV[3]) then
    return nil
end

-- Already queued: wait for the lock.
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
    return math.max(0, redis.call('pttl', KEYS[1]))
end

-- Join the queue, with a deadline after the previous waiter's.
local ttl
local last = redis.call('lindex', KEYS[2], -1)
local last_deadline = false
if last ~= false and last ~= ARGV[2] then
    last_deadline = redis.call('zscore', KEYS[3], last)
end
if last_deadline ~= false then
    ttl = tonumber(last_deadline) - tonumber(ARGV[4])
else
    ttl = redis.call('pttl', KEYS[1])
end
local deadline = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4])
if redis.call('zadd', KEYS[3], deadline, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
