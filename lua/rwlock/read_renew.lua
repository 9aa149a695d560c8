-- Renew a batch of read-locked locks (Redisson's ReadLockTask, 4.4+): for
-- each lock, every read hold of this client's owners and then the lock.
-- KEYS in pairs: lock hash, the prefix of its readers' timeout keys ({name})
-- ARGV[1] lease in ms; then per pair: k, followed by k reader fields
-- Reply: array, per pair 1 if any of those readers still holds the lock (it
-- was re-expired), 0 if none does. A key of another type counts as 0.
local renewed = {}
local arg = 2
for i = 1, #KEYS, 2 do
    local alive = false
    local readers = tonumber(ARGV[arg])
    arg = arg + 1
    for _ = 1, readers do
        local field = ARGV[arg]
        arg = arg + 1
        local count = redis.pcall('hget', KEYS[i], field)
        if type(count) == 'string' then
            alive = true
            for n = tonumber(count), 1, -1 do
                redis.call('pexpire', KEYS[i + 1] .. ':' .. field .. ':rwlock_timeout:' .. n, ARGV[1])
            end
        end
    end
    if alive then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
