-- Return ARGV[1] permits and announce the new total (Redisson's
-- RSemaphore.release; with ARGV[4] = 1, releaseIfExists: only when the
-- semaphore exists). The total wakes up to that many waiters, Java or Rust.
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] permits, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] latch TTL in ms,
-- ARGV[4] 1: only if the semaphore exists
-- Reply: 1 released, 0 not (no semaphore, with ARGV[4] = 1), nil refused:
-- the total would pass 2147483647, which a JVM client cannot read.
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local released = 0
if ARGV[4] ~= '1' or redis.call('exists', KEYS[1]) == 1 then
    if tonumber(redis.call('get', KEYS[1]) or 0) + tonumber(ARGV[1]) > 2147483647 then
        return nil
    end
    local total = redis.call('incrby', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], total)
    released = 1
end
redis.call('set', KEYS[3], released, 'px', ARGV[3])
return released
