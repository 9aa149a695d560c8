-- Release one hold of a fair lock (Redisson FairLock semantics, with the
-- unlock latch); a full release tells the first waiter in line, on its own channel.
-- KEYS[1] lock hash, KEYS[2] waiting queue, KEYS[3] waiter deadlines,
-- KEYS[4] the lock's channel (waiters listen on <channel>:<their field>),
-- KEYS[5] unlock latch
-- ARGV[1] unlock message (0), ARGV[2] lease in ms while still held,
-- ARGV[3] owner field, ARGV[4] now (wall clock, ms), ARGV[5] PUBLISH or
-- SPUBLISH, ARGV[6] latch TTL in ms
-- Reply: 1 released (also when the lock was already gone, as in Redisson),
-- 0 still held, nil not held by ARGV[3].
local replay = redis.call('get', KEYS[5])
if replay then
    return tonumber(replay)
end

-- (prelude.lua is prepended.)
purge_expired(KEYS[2], KEYS[3], tonumber(ARGV[4]))

if redis.call('exists', KEYS[1]) == 0 then
    local first = redis.call('lindex', KEYS[2], 0)
    if first then
        redis.call(ARGV[5], KEYS[4] .. ':' .. first, ARGV[1])
    end
    redis.call('set', KEYS[5], 1, 'px', ARGV[6])
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[6])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
local first = redis.call('lindex', KEYS[2], 0)
if first then
    redis.call(ARGV[5], KEYS[4] .. ':' .. first, ARGV[1])
end
return 1
