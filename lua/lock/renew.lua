-- Renew a batch of watchdog-held locks (Redisson LockTask semantics).
-- KEYS[i] lock hash; ARGV[1] lease in ms; ARGV[i + 1] owner field of KEYS[i]
-- Reply: array, 1 where KEYS[i] is still held by its field and was re-expired,
-- 0 where it is not. A key of another type counts as 0 instead of failing the batch.
local renewed = {}
for i = 1, #KEYS do
    local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
    if held == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
