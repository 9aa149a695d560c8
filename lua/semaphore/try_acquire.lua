-- Take ARGV[1] permits if that many are available (Redisson's
-- RSemaphore.tryAcquire), recording the outcome in this request's latch.
-- KEYS[1] semaphore (string), KEYS[2] request latch
-- ARGV[1] permits, ARGV[2] latch TTL in ms
-- Reply: 1 taken, 0 too few available.
-- A replay with the same latch returns the first reply instead of taking twice.
local replay = redis.call('get', KEYS[2])
if replay then
    return tonumber(replay)
end
local taken = 0
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    taken = 1
end
redis.call('set', KEYS[2], taken, 'px', ARGV[2])
return taken
