-- Release one hold of every value of a group multi lock (Redisson's
-- RedissonFasterMultiLock unlock, with the unlock latch).
-- KEYS[1] the group hash, KEYS[2] the group's channel, KEYS[3] unlock latch
-- ARGV[1] owner field, ARGV[2] unlock message (0), ARGV[3] lease in ms while
-- still held, ARGV[4] PUBLISH or SPUBLISH, ARGV[5] latch TTL in ms, ARGV[6]
-- now (wall clock, ms), ARGV[7..] the values' field ids
-- Reply: 1 every value released, 0 still held (one hold fewer), nil not held
-- by ARGV[1]: a value's hold had ended or was taken over. Its other values
-- are released all the same (nothing stays locked for a lost hold).
-- Publishes 0 when a value became free. A retry with the same latch key
-- replays the first reply instead of running twice.
local replay = redis.call('get', KEYS[3])
if replay then
    if replay == 'lost' then
        return nil
    end
    return tonumber(replay)
end
local owner, now = ARGV[1], tonumber(ARGV[6])
local ours, held = {}, true
for i = 7, #ARGV do
    local ends = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. owner .. ':expire_time'))
    ours[i] = redis.call('hget', KEYS[1], ARGV[i]) == owner and ends ~= nil and ends >= now
    held = held and ours[i]
end
local renewed = tonumber(ARGV[3]) + now
local freed, kept = 0, 0
for i = 7, #ARGV do
    if ours[i] then
        local h = ARGV[i]
        local ends_field, count_field = h .. ':' .. owner .. ':expire_time', h .. ':' .. owner .. ':lock_count'
        if redis.call('hincrby', KEYS[1], count_field, -1) <= 0 then
            redis.call('hdel', KEYS[1], h, ends_field, count_field)
            freed = freed + 1
        else
            if tonumber(redis.call('hget', KEYS[1], ends_field)) < renewed then
                redis.call('hset', KEYS[1], ends_field, renewed)
            end
            kept = kept + 1
        end
    end
end
if freed > 0 then
    redis.call(ARGV[4], KEYS[2], ARGV[2])
end
if not held then
    redis.call('set', KEYS[3], 'lost', 'px', ARGV[5])
    return nil
end
if kept == 0 then
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return 1
end
if tonumber(ARGV[3]) > redis.call('pttl', KEYS[1]) then
    redis.call('pexpire', KEYS[1], ARGV[3])
end
redis.call('set', KEYS[3], 0, 'px', ARGV[5])
return 0
