-- A waiter leaves the queue without the lock (Redisson FairLock acquireFailed):
-- the waiters behind it no longer wait for its budget.
-- KEYS[1] waiting queue, KEYS[2] waiter deadlines
-- ARGV[1] the leaving waiter's field, ARGV[2] the wait budget (ms) it queued with
-- Reply: nil.
local behind = false
for _, waiter in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do
    if behind then
        redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), waiter)
    elseif waiter == ARGV[1] then
        behind = true
    end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return nil
