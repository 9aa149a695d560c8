-- Acquire (or re-enter) every value of a group multi lock, all or nothing
-- (Redisson's getMultiLock(group, values), RedissonFasterMultiLock).
-- One hash per group: for each value's field id h (see naming::value_field),
-- `h` -> the owner field, `h:<owner>:expire_time` -> the wall-clock ms its
-- hold ends, `h:<owner>:lock_count` -> its hold count. A value is held while
-- its owner's expire_time is ahead of now. The key's own TTL only collects the
-- whole hash: it is raised to the lease, never lowered.
-- KEYS[1] the group hash
-- ARGV[1] lease in ms, ARGV[2] now (wall clock, ms), ARGV[3] owner field,
-- ARGV[4..] the values' field ids
-- Reply: nil when every value is now held by ARGV[3]; otherwise nothing is
-- written and the reply is how long (ms) until the last of the values held by
-- others ends.
local lease, now, owner = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local existed = redis.call('exists', KEYS[1]) == 1
if existed then
    local wait = -1
    for i = 4, #ARGV do
        local holder = redis.call('hget', KEYS[1], ARGV[i])
        if holder and holder ~= owner then
            local ends = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time'))
            if ends and ends > now then
                wait = math.max(wait, ends - now)
            end
        end
    end
    if wait > 0 then
        return wait
    end
end
local deadline = now + lease
for i = 4, #ARGV do
    local h = ARGV[i]
    local holder = redis.call('hget', KEYS[1], h)
    local ends_field, count_field = h .. ':' .. owner .. ':expire_time', h .. ':' .. owner .. ':lock_count'
    local ends = tonumber(redis.call('hget', KEYS[1], ends_field))
    if holder == owner and ends and ends >= now then
        -- A re-entry: one more hold, and the hold lasts at least the lease.
        redis.call('hincrby', KEYS[1], count_field, 1)
        if ends < deadline then
            redis.call('hset', KEYS[1], ends_field, deadline)
        end
    else
        if holder and holder ~= owner then
            -- Taken over from a holder whose hold ended: its bookkeeping goes
            -- too, so that it cannot count for that holder later.
            redis.call('hdel', KEYS[1], h .. ':' .. holder .. ':expire_time', h .. ':' .. holder .. ':lock_count')
        end
        redis.call('hset', KEYS[1], h, owner, ends_field, deadline, count_field, 1)
    end
end
if existed then
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 and lease > ttl then
        redis.call('pexpire', KEYS[1], lease)
    end
else
    redis.call('pexpire', KEYS[1], lease)
end
return nil
