-- Count down by one (Redisson's countDown): at zero the latch is deleted
-- and 0 is published, which opens it for every waiter, Java or Rust. On a
-- missing latch, as in Redisson, nothing is left behind and nothing is sent.
-- KEYS[1] latch, KEYS[2] channel, KEYS[3] request latch
-- ARGV[1] PUBLISH or SPUBLISH, ARGV[2] request latch TTL in ms
-- Reply: the count left (0 once open).
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    redis.call(ARGV[1], KEYS[2], 0)
end
if left < 0 then
    left = 0
end
redis.call('set', KEYS[3], left, 'px', ARGV[2])
return left
