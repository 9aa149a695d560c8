-- Take ARGV[1] permits, each under one of the client's ids, leased until
-- ARGV[2] (Redisson's RPermitExpirableSemaphore.tryAcquire). Expired leases
-- go back to the pool first, at most as many as requested, announcing the
-- new total.
-- KEYS[1] semaphore (string), KEYS[2] leases (sorted set: id -> deadline ms),
-- KEYS[3] channel, KEYS[4] request latch
-- ARGV[1] permits, ARGV[2] lease deadline in ms (ARGV[4]: never), ARGV[3] now
-- in ms, ARGV[4] the "never" deadline, ARGV[5] PUBLISH or SPUBLISH,
-- ARGV[6] request latch TTL in ms, ARGV[7..] the permit ids (16 raw bytes)
-- Reply: 'OK' taken; ':<deadline>' none free, the earliest lease ends then;
-- nil none free and no lease ends.
local replay = redis.call('get', KEYS[4])
if replay then
    if replay == '' then
        return nil
    end
    return replay
end
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local total = redis.call('incrby', KEYS[1], #expired)
    if total > 0 then
        redis.call(ARGV[5], KEYS[3], total)
    end
end
local reply = ''
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 7, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    reply = 'OK'
else
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if first[1] ~= nil and first[2] ~= ARGV[4] then
        reply = ':' .. first[2]
    end
end
redis.call('set', KEYS[4], reply, 'px', ARGV[6])
if reply == '' then
    return nil
end
return reply
