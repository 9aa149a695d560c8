-- Gives an unlock or request latch without a TTL the lifetime every latch is
-- written with, if it still has none: its request may still be retried
-- within that time, and it expires after it.
-- KEYS: latch. ARGV: ttl (ms).
if redis.call('pttl', KEYS[1]) == -1 then
  return redis.call('pexpire', KEYS[1], ARGV[1])
end
return 0
