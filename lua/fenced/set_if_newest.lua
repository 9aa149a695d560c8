-- Writes a value guarded by a fencing token: only if the token is at least
-- the highest token that has written this key, so a holder that lost its
-- lock (and was overtaken by a newer holder) cannot write.
-- KEYS[1] the key to write, KEYS[2] the highest token seen for it
-- ARGV[1] the writer's token, ARGV[2] the value
-- Reply: 1 written, 0 refused (a newer token has written).
local seen = tonumber(redis.call('get', KEYS[2]) or '-1')
local token = tonumber(ARGV[1])
if token < seen then
    return 0
end
redis.call('set', KEYS[2], token)
redis.call('set', KEYS[1], ARGV[2])
return 1
