-- Deletes a read-hold key of a read-write lock when the lock's hash no
-- longer has that hold (its reader's count is below the hold's number):
-- nothing reads such a key any more. Re-checked here, so a reader that
-- took the hold again meanwhile keeps it.
-- KEYS: lock hash, hold key. ARGV: reader field, hold number.
local ok, count = pcall(redis.call, 'hget', KEYS[1], ARGV[1])
if not ok then
  return 0
end
if tonumber(count or '0') < tonumber(ARGV[2]) then
  return redis.call('del', KEYS[2])
end
return 0
