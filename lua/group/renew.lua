-- Renew a batch of watchdog-held group multi locks (Redisson's
-- FastMultilockTask): each value's hold ends no sooner than now + lease, and
-- the group key lives at least the lease.
-- KEYS[i] the group hash of hold i
-- ARGV[1] lease in ms, ARGV[2] now (wall clock, ms); then for each hold in
-- KEYS order: its owner field, the number n of its values, their n field ids
-- Reply: array, 1 where every value of hold i is still its owner's and was
-- renewed, 0 where one is not (nothing of that hold is renewed).
local lease, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local renewed, a = {}, 3
for i = 1, #KEYS do
    local owner, n = ARGV[a], tonumber(ARGV[a + 1])
    local first, last = a + 2, a + 1 + n
    local ours = redis.call('type', KEYS[i])['ok'] == 'hash'
    for j = first, last do
        ours = ours and redis.call('hget', KEYS[i], ARGV[j]) == owner
    end
    if ours then
        local deadline = now + lease
        for j = first, last do
            local ends_field = ARGV[j] .. ':' .. owner .. ':expire_time'
            local ends = tonumber(redis.call('hget', KEYS[i], ends_field))
            if ends == nil or ends < deadline then
                redis.call('hset', KEYS[i], ends_field, deadline)
            end
        end
        if redis.call('pttl', KEYS[i]) < lease then
            redis.call('pexpire', KEYS[i], lease)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
    a = last + 1
end
return renewed
