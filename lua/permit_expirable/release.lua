-- Return the permits with the given ids (Redisson's tryRelease). Expired
-- leases go back to the pool first (so an expired id is not released twice),
-- then the ids still leased are returned and announced: for one id the new
-- total (as Redisson's tryRelease(id)), for several how many were returned
-- (as its tryRelease(ids)).
-- KEYS[1] semaphore, KEYS[2] channel, KEYS[3] leases, KEYS[4] request latch
-- ARGV[1] now in ms, ARGV[2] PUBLISH or SPUBLISH, ARGV[3] request latch TTL
-- in ms, ARGV[4..] permit ids (16 raw bytes)
-- Reply: how many of the ids were returned.
local replay = redis.call('get', KEYS[4])
if replay then
    return tonumber(replay)
end
local expired = redis.call('zrangebyscore', KEYS[3], 0, ARGV[1], 'limit', 0, -1)
if #expired > 0 then
    redis.call('zrem', KEYS[3], unpack(expired))
    local total = redis.call('incrby', KEYS[1], #expired)
    if total > 0 then
        redis.call(ARGV[2], KEYS[2], total)
    end
end
local ids = {}
for i = 4, #ARGV do
    table.insert(ids, ARGV[i])
end
local returned = redis.call('zrem', KEYS[3], unpack(ids))
if returned > 0 then
    local total = redis.call('incrby', KEYS[1], returned)
    if #ids == 1 then
        redis.call(ARGV[2], KEYS[2], total)
    else
        redis.call(ARGV[2], KEYS[2], returned)
    end
end
redis.call('set', KEYS[4], returned, 'px', ARGV[3])
return returned
